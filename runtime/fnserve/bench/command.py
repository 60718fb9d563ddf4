"""`fnserve bench`: run the sweep, print the report, write the CSV and the chart."""

from __future__ import annotations

import importlib.util
import sys

from fnserve.bench.options import BenchError, BenchOptions
from fnserve.bench.report import cpu_warnings, format_report, integrity_errors, write_csv
from fnserve.bench.runner import Progress, run_sweep, run_ui

EXTRA_HINT = "pip install 'fnserve[loadtest]'"


def require_extra(options: BenchOptions) -> None:
    """Fail early, with the install command, when the loadtest extra is missing.

    Raises:
        BenchError: Locust, grpcio or (for --plot) matplotlib cannot be imported.
    """
    needed = ["locust", "grpc"] + (["matplotlib"] if options.plot else [])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise BenchError(
            f"fnserve bench needs {', '.join(missing)}, which are not installed: {EXTRA_HINT}"
        )


def run(options: BenchOptions) -> int:
    """Run `fnserve bench`; returns the exit status (1: integrity errors, 130: interrupted).

    The report and files cover the steps that finished, also when the sweep stopped early.

    Raises:
        BenchError: the sweep could not run or stopped early (missing extra, server, model
            or data problems, a failed load generator).
    """
    require_extra(options)
    if options.ui:
        return run_ui(options)
    sweep = run_sweep(options, Progress(sys.stderr))
    if sweep.steps:
        sys.stdout.write(format_report(sweep) + "\n")
    for warning in cpu_warnings(sweep):
        sys.stderr.write(f"warning: {warning}\n")
    errors = integrity_errors(sweep)
    for error in errors:
        sys.stderr.write(f"error: {error}\n")
    if options.csv and sweep.steps:
        write_csv(sweep, options.csv)
        sys.stderr.write(f"wrote {options.csv}\n")
    if options.plot and sweep.steps:
        from fnserve.bench.plot import save_plot  # matplotlib loads only when asked for

        save_plot(sweep, options.plot)
        sys.stderr.write(f"wrote {options.plot}\n")
    if sweep.stopped == "interrupted":
        sys.stderr.write("interrupted: the report covers the steps that finished\n")
        return 130
    if sweep.stopped:
        raise BenchError(sweep.stopped)
    return 1 if errors else 0
