"""`fnserve bench`: a Locust harness that reports like Triton's perf_analyzer.

Two sides, two processes. The *driver* (`driver.py`, started as a subprocess) imports Locust,
which monkey-patches the process for gevent, and runs the users of `users.py`; it sends its
results as JSON lines. The *command* side (`command.py`, `runner.py`, `report.py`, `plot.py`)
never imports Locust: it starts the driver, shows progress, prints the report and writes the
CSV and the chart. Nothing in the server imports this package.
"""
