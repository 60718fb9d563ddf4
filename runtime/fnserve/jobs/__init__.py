"""Durable asynchronous inference: jobs submitted now, run through the model's batcher at a
lower priority than online requests, their results stored (SQLite embedded, PostgreSQL shared).

Layering: `model.py` (the records), `store/` (where they live), `service.py` (submit, wait,
cancel, backlog limits), `worker.py` (claims and runs jobs under a lease). Frontends call the
service; nothing here knows about HTTP or gRPC.
"""
