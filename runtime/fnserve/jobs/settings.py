"""How the jobs subsystem behaves on one server (the `--jobs-*` flags)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobSettings:
    """Jobs settings.

    Args:
        workers: jobs of one model this server runs at once (0: the model's max batch size,
            so jobs fill at most about one batch at a time).
        online_workers: the same while online requests are recent (see `worker.py`): few, so
            the CPU jobs cost (claiming, decoding, storing results) does not come out of online
            latency; raise it for models whose batches cost the accelerator, not the CPU.
        online_rate: jobs this server starts per second, at most, while online requests are
            recent (0: no pace, only `online_workers`): each job costs the server's CPU about
            half a millisecond in store calls and coding, which at full speed comes out of
            online p99; paced, jobs still progress under any online load.
        lease_s: how long a claimed job stays this server's without a renewal; renewed every
            third of it. A server that dies loses its jobs to others after this long.
        max_attempts: attempts before a job fails with its last error.
        max_backlog: queued jobs one model may hold; one more is refused (429).
        result_ttl_s: finished jobs and their results are deleted this long after they end.
        max_result_bytes: largest stored result; a larger one fails its job, stores nothing.
        max_wait_s: longest long-poll (`GET /v2/jobs/{id}?wait=`) a client may ask for.
        poll_interval_s: how often the store is asked for new jobs (submitted to another
            server) and for jobs finished elsewhere that a long-poll waits on.
        callback_attempts: tries to deliver a completion callback before giving up.
        callback_timeout_s: how long one callback delivery may take.
    """

    workers: int = 0
    online_workers: int = 1
    online_rate: float = 20.0
    lease_s: float = 30.0
    max_attempts: int = 3
    max_backlog: int = 100_000
    result_ttl_s: float = 7 * 24 * 3600.0
    max_result_bytes: int = 64 * 1024 * 1024
    max_wait_s: float = 60.0
    poll_interval_s: float = 1.0
    callback_attempts: int = 5
    callback_timeout_s: float = 10.0
