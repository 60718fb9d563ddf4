"""The load-generating process of `fnserve bench`: Locust as a library, results as JSON lines.

    python -m fnserve.bench.driver OPTIONS.json                    # local runner or master
    python -m fnserve.bench.driver OPTIONS.json --worker HOST:PORT # one of `--workers N`

Importing Locust monkey-patches this process for gevent, which is why it is a process of its
own. For each concurrency it snapshots the model's statistics, starts the users, measures the
window after the warm-up, stops the users gracefully (each finishes the request it has in
flight, so the server and the harness see the same requests), reads the statistics again and
writes one `step` event. Events go to stdout, one JSON object per line:
`ready`, `progress`, `step`, `error`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any

import gevent  # type: ignore[import-untyped]
import gevent.event  # type: ignore[import-untyped]
import locust  # patches sockets, threads and subprocess for gevent on import
import psutil
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from fnserve.bench import users
from fnserve.bench.options import BenchError, BenchOptions
from fnserve.bench.probe import ServerCounters, ServerProbe, probe_for
from fnserve.bench.report import LoadCpu, StepResult, summarize

STOP_TIMEOUT_S = 30.0  # how long users may take to finish their in-flight request at a stop
SETTLE_TIMEOUT_S = 3.0  # how long the server may take to count requests answered at the stop
PROGRESS_INTERVAL_S = 0.5
# Set on Ctrl-C (which reaches every process of the group): the master ends the sweep between
# two ticks and tells its workers to quit; without the handler gevent would print the
# KeyboardInterrupt of each process from inside its hub.
INTERRUPTED = gevent.event.Event()


def emit(event: str, **data: Any) -> None:
    """One event line for the command side."""
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


class Recorder:
    """Every request's start (epoch s) and latency (ms), at full precision.

    Locust's own statistics round latencies below 100 ms to whole milliseconds, too coarse
    for sub-millisecond servers, so percentiles are computed from these arrays instead.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.starts, self.latencies, self.failures = array("d"), array("d"), array("d")
        users.SENT.value = 0

    def on_request(
        self, response_time: float, exception: object, start_time: float = 0.0, **_: Any
    ) -> None:
        if exception is None:
            self.starts.append(start_time)
            self.latencies.append(response_time)
        else:
            self.failures.append(start_time)

    def export(self) -> dict[str, Any]:
        """This process's share of a step, as msgpack-friendly data."""
        return {
            "sent": users.SENT.value,
            "starts": self.starts.tobytes(),
            "latencies": self.latencies.tobytes(),
            "failures": self.failures.tobytes(),
        }

    def absorb(self, data: dict[str, Any]) -> None:
        """Add a worker's share (see `export`)."""
        users.SENT.value += data["sent"]
        self.starts.frombytes(data["starts"])
        self.latencies.frombytes(data["latencies"])
        self.failures.frombytes(data["failures"])


def _environment(options: BenchOptions, stop_timeout_s: float) -> Environment:
    user_class = users.user_class_for(options.protocol, options.binary)
    host = options.http_base if options.protocol == "http" else options.grpc_target
    args = [
        "--host",
        host,
        "--model",
        options.model,
        "--model-version",
        options.model_version,
        "--input-data",
        options.input_data,
        "--batch-size",
        str(options.batch_size),
        "--shape",
        " ".join(f"{n}:{','.join(map(str, d))}" for n, d in options.shapes),
    ]
    parsed = get_parser().parse_args(args)
    return Environment(
        user_classes=[user_class], host=host, parsed_options=parsed, stop_timeout=stop_timeout_s
    )


class LocalLoad:
    """All users in this process (Locust's LocalRunner)."""

    def __init__(self, environment: Environment, recorder: Recorder) -> None:
        self.runner = environment.create_local_runner()
        self.recorder = recorder

    def pids(self) -> list[int]:
        return [os.getpid()]

    def start(self, users_count: int) -> None:
        self.recorder.reset()
        self.runner.start(users_count, spawn_rate=_spawn_rate(users_count))

    def counts(self) -> tuple[int, int]:
        return len(self.recorder.latencies), len(self.recorder.failures)

    def stop(self) -> None:
        self.runner.stop()  # graceful: returns once every user finished its request

    def close(self) -> None:
        self.runner.quit()


class DistributedLoad:
    """A Locust master in this process and `workers` worker processes."""

    def __init__(
        self, environment: Environment, recorder: Recorder, spec_path: str, workers: int
    ) -> None:
        self.runner: MasterRunner = environment.create_master_runner("127.0.0.1", 0)
        self.recorder = recorder
        self.replies: list[str] = []
        self.runner.register_message("fnserve_step", self._on_step)
        master = f"127.0.0.1:{self.runner.server.port}"
        command = [sys.executable, "-m", "fnserve.bench.driver", spec_path, "--worker", master]
        self.procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
        try:
            self._wait_ready("start")
        except BenchError:
            for proc in self.procs:
                proc.kill()
            raise
        self.worker_ids = [client.id for client in self.runner.clients.all]

    def _on_step(self, environment: Environment, msg: Any, **_: Any) -> None:
        self.recorder.absorb(msg.data)
        self.replies.append(msg.node_id)

    def _wait_ready(self, when: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.runner.clients.ready) < len(self.procs):
            dead = [p.returncode for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise BenchError(
                    f"Locust workers did not get ready to {when} (exit codes {dead}, "
                    f"see the messages above)"
                )
            gevent.sleep(0.05)

    def pids(self) -> list[int]:
        return [os.getpid(), *(p.pid for p in self.procs)]

    def counts(self) -> tuple[int, int]:
        total = self.runner.stats.total  # as the workers last reported (every 3 s)
        return total.num_requests - total.num_failures, total.num_failures

    def start(self, users_count: int) -> None:
        self._wait_ready("start the next step")
        self.recorder.reset()
        self.runner.start(users_count, spawn_rate=_spawn_rate(users_count))

    def stop(self) -> None:
        self.runner.stop()  # returns when every worker stopped its users gracefully
        self.replies.clear()
        for worker in self.worker_ids:
            self.runner.send_message("fnserve_collect", client_id=worker)
        deadline = time.monotonic() + 30.0
        while len(self.replies) < len(self.worker_ids) and time.monotonic() < deadline:
            gevent.sleep(0.01)
        if len(self.replies) < len(self.worker_ids):
            raise BenchError(
                f"only {len(self.replies)} of {len(self.worker_ids)} Locust workers "
                f"reported their requests"
            )

    def close(self) -> None:
        self.runner.quit()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _spawn_rate(users_count: int) -> float:
    return float(users_count) * 20  # every user within 50 ms: the warm-up absorbs the ramp


class CpuMeter:
    """CPU seconds of the load-generating processes, to tell when the client is the limit."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.procs = [psutil.Process(pid) for pid in pids]
        self.cores = len(set().union(*(p.cpu_affinity() or [] for p in self.procs))) or 1

    def sample(self) -> tuple[float, list[float]]:
        return time.monotonic(), [sum(p.cpu_times()[:2]) for p in self.procs]

    def load(self, a: tuple[float, list[float]], b: tuple[float, list[float]]) -> LoadCpu:
        elapsed = max(b[0] - a[0], 1e-9)
        used = [(y - x) / elapsed for x, y in zip(a[1], b[1], strict=True)]
        return LoadCpu(round(max(used), 3), round(sum(used), 3), self.cores, len(self.procs))


Load = LocalLoad | DistributedLoad


def run_step(load: Load, probe: ServerProbe, options: BenchOptions, users_count: int) -> StepResult:
    """One concurrency level: warm up, measure the window, stop, compare with the server."""
    meter = CpuMeter(load.pids())
    before = probe.counters(options.model, options.model_version)
    started = time.time()
    load.start(users_count)
    begin, end = started + options.warmup_s, started + options.warmup_s + options.duration_s
    report = _progress_reporter(load, users_count, started, end)
    _sleep_until(begin, report)
    cpu_begin = meter.sample()
    _sleep_until(end, report)
    cpu_end = meter.sample()
    load.stop()
    sent = users.SENT.value
    after = _settled(probe, options, before.requests + sent)
    rec = load.recorder
    client = summarize(
        _numpy(rec.starts), _numpy(rec.latencies), _numpy(rec.failures), (begin, end)
    )
    cpu = meter.load(cpu_begin, cpu_end)
    return StepResult(users_count, client, sent, after.minus(before), cpu)


def _numpy(values: array[float]) -> Any:
    import numpy as np

    return np.frombuffer(values, dtype=np.float64) if len(values) else np.empty(0)


def _progress_reporter(
    load: Load, users_count: int, started: float, end: float
) -> Callable[[], None]:
    def report() -> None:
        requests, errors = load.counts()
        emit(
            "progress",
            concurrency=users_count,
            elapsed_s=round(time.time() - started, 2),
            total_s=round(end - started, 2),
            requests=requests,
            errors=errors,
        )

    return report


def _sleep_until(deadline: float, tick: Callable[[], None]) -> None:
    while (left := deadline - time.time()) > 0:
        gevent.sleep(min(left, PROGRESS_INTERVAL_S))
        if INTERRUPTED.is_set():
            raise KeyboardInterrupt
        tick()


def _settled(probe: ServerProbe, options: BenchOptions, expected: int) -> ServerCounters:
    """The counters once the server counted `expected` requests, or after a short wait."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        counters = probe.counters(options.model, options.model_version)
        if counters.requests >= expected or time.monotonic() > deadline:
            return counters
        gevent.sleep(0.05)


def run_master(options: BenchOptions, spec_path: str) -> None:
    """The whole sweep, in this process or spread over worker processes."""
    environment = _environment(options, STOP_TIMEOUT_S)
    user_class = environment.user_classes[0]
    workload, _ = users.feed(user_class, environment)  # fails fast on a bad model or data
    probe = probe_for(options)
    recorder = Recorder()
    if options.workers:
        load: Load = DistributedLoad(environment, recorder, spec_path, options.workers)
    else:
        environment.events.request.add_listener(recorder.on_request)  # type: ignore[no-untyped-call]
        load = LocalLoad(environment, recorder)
    emit(
        "ready",
        inputs=workload.describe(),
        max_batch_size=workload.max_batch_size,
        locust_version=locust.__version__,
        processes=max(1, options.workers),
    )
    try:
        for users_count in options.concurrency:
            step = run_step(load, probe, options, users_count)
            emit("step", step=step.to_json())
    finally:
        load.close()


def run_worker(options: BenchOptions, master: str) -> None:
    """One worker of `--workers N`: runs the users the master assigns, reports on request."""
    environment = _environment(options, stop_timeout_s=0.0)
    users.feed(environment.user_classes[0], environment)  # ready before the master starts users
    recorder = Recorder()
    environment.events.request.add_listener(recorder.on_request)  # type: ignore[no-untyped-call]
    host, _, port = master.rpartition(":")
    runner: WorkerRunner = environment.create_worker_runner(host, int(port))

    def collect(environment: Environment, msg: Any, **_: Any) -> None:
        runner.send_message("fnserve_step", recorder.export())
        recorder.reset()

    def no_grace_sleep(**_: Any) -> None:
        # After a stop, a worker sleeps stop_timeout before it reports ready again; its users
        # are already gone by now, so that sleep would only add dead time to every step.
        environment.stop_timeout = 0.0

    runner.register_message("fnserve_collect", collect)
    environment.events.test_stop.add_listener(no_grace_sleep)  # type: ignore[no-untyped-call]
    runner.greenlet.join()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the driver process; exit status 2 for a BenchError (reported as `error`)."""
    parser = argparse.ArgumentParser(prog="python -m fnserve.bench.driver")
    parser.add_argument("spec", help="JSON file with the BenchOptions")
    parser.add_argument("--worker", metavar="HOST:PORT", help="run as a worker of this master")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    gevent.signal_handler(signal.SIGINT, INTERRUPTED.set)
    with open(args.spec) as spec:
        options = BenchOptions.from_json(spec.read())
    try:
        if args.worker:
            run_worker(options, args.worker)
        else:
            run_master(options, args.spec)
    except BenchError as exc:
        if args.worker:
            sys.stderr.write(f"error: Locust worker: {exc}\n")
        else:
            emit("error", message=str(exc))
        return 2
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the command reports
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
