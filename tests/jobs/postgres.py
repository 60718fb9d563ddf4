"""A throwaway PostgreSQL server for the tests: `initdb` into a temporary folder, `postgres` on a
free loopback port, everything removed when it stops.

```python
with PostgresServer.start() as server:
    store = PostgresJobStore(server.url)  # postgresql://postgres@127.0.0.1:PORT/postgres
```

The binaries come from, in order: `$FNSERVE_TEST_PG_BINDIR`; Debian's `postgresql` package
(`/usr/lib/postgresql/N/bin`, the newest N); `pg_ctl` on the PATH; the `pgserver` wheel of the
test dependency group, which bundles them, so a fresh machine that ran the project's set-up
always has one. PostgreSQL refuses to run as root (CI runs as root): then `initdb` and
`postgres` run as the unprivileged user `nobody`, in a folder it owns, from a copy of the
binaries when it cannot reach the originals (a venv under `/root`).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

_UNPRIVILEGED_USER = "nobody"
_READY = "database system is ready to accept connections"


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL binaries here, or the server would not start (the message says why)."""


def find_bindir() -> Path | None:
    """The folder holding `initdb` and `postgres`, or None when there is none."""
    candidates: list[Path] = []
    if override := os.environ.get("FNSERVE_TEST_PG_BINDIR"):
        return Path(override)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version, reverse=True)
    if pg_ctl := shutil.which("pg_ctl"):
        candidates.append(Path(pg_ctl).resolve().parent)
    if spec := importlib.util.find_spec("pgserver"):
        assert spec.origin is not None
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    return next(
        (c for c in candidates if (c / "initdb").exists() and (c / "postgres").exists()), None
    )


def _version(bindir: Path) -> int:
    digits = re.match(r"\d+", bindir.parent.name)
    return int(digits.group()) if digits else 0


@dataclass
class PostgresServer:
    """A running throwaway server; `url` connects as the superuser `postgres`, no password."""

    url: str
    port: int
    base: Path  # removed when the server stops
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, *, durable: bool = False, timeout_s: float = 60) -> PostgresServer:
        """initdb and start a server; returns once it accepts connections.

        Args:
            durable: keep fsync on (benchmarks); tests turn it off, they never crash the OS.

        Raises:
            PostgresUnavailableError: no binaries, or initdb or the server failed (with its log).
        """
        bindir = find_bindir()
        if bindir is None:
            raise PostgresUnavailableError(
                "no PostgreSQL binaries: install the test dependency group (pgserver bundles "
                "them) or Debian's postgresql package, or set FNSERVE_TEST_PG_BINDIR"
            )
        base = Path(tempfile.mkdtemp(prefix="fnserve-pg-"))
        try:
            return cls._start(bindir, base, durable, timeout_s)
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise

    @classmethod
    def _start(cls, bindir: Path, base: Path, durable: bool, timeout_s: float) -> PostgresServer:
        user = _unprivileged_user() if os.geteuid() == 0 else None
        if user is not None:
            os.chown(base, user.pw_uid, user.pw_gid)
            bindir = _reachable_bindir(bindir, base, user)
        data = base / "data"
        _run(user, [bindir / "initdb", "-D", data, "-U", "postgres", "--auth=trust",
                    "--no-locale", "--encoding=UTF8", "--no-sync"], timeout_s)  # fmt: skip
        for _ in range(3):  # the free port may be taken by someone else before postgres binds it
            port = _free_port()
            process = _spawn(user, bindir, data, port, base / "postgres.log", durable)
            server = cls(f"postgresql://postgres@127.0.0.1:{port}/postgres", port, base, process)
            if server._wait_ready(timeout_s):
                return server
            if "could not bind" not in server.log():
                break
        raise PostgresUnavailableError(f"postgres did not start; its log:\n{server.log()[-3000:]}")

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if _READY in self.log() and _accepts(self.port):
                return True
            time.sleep(0.05)
        self.process.kill()
        self.process.wait()
        return False

    def log(self) -> str:
        path = self.base / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server (fast shutdown: sessions are ended) and remove its files."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _unprivileged_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(_UNPRIVILEGED_USER)
    except KeyError:
        raise PostgresUnavailableError(
            f"running as root, and there is no user {_UNPRIVILEGED_USER!r} to run postgres as "
            "(postgres refuses to run as root)"
        ) from None


def _reachable_bindir(bindir: Path, base: Path, user: pwd.struct_passwd) -> Path:
    """`bindir`, or a copy of its installation in `base` when `user` cannot run it from there."""
    try:
        probe = subprocess.run(
            [bindir / "postgres", "--version"], user=user.pw_uid, group=user.pw_gid,
            extra_groups=[], capture_output=True, check=False, timeout=30,
        )  # fmt: skip
        if probe.returncode == 0:
            return bindir
    except PermissionError:
        pass
    # The binaries find share/ and lib/ relative to themselves, and a wheel's binaries their
    # libraries in the package's auditwheel folder (`$ORIGIN/../../../pgserver.libs`): copy
    # the installation and that folder, keeping where they lie relative to each other.
    install, package = bindir.parent, bindir.parent.parent
    copy = base / "pg" / package.name / install.name
    shutil.copytree(install, copy, symlinks=True)
    wheel_libs = package.parent / f"{package.name}.libs"
    if wheel_libs.is_dir():
        shutil.copytree(wheel_libs, base / "pg" / wheel_libs.name, symlinks=True)
    return copy / bindir.name


def _run(user: pwd.struct_passwd | None, command: list[str | Path], timeout_s: float) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=timeout_s,
        **_as_user(user),
    )  # fmt: skip
    if done.returncode != 0:
        raise PostgresUnavailableError(
            f"{Path(command[0]).name} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )


def _spawn(
    user: pwd.struct_passwd | None, bindir: Path, data: Path, port: int, log: Path, durable: bool
) -> subprocess.Popen[bytes]:
    settings = {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": "",  # TCP only: no /var/run/postgresql to own
        "max_connections": "300",
        "fsync": "on" if durable else "off",
        "synchronous_commit": "on" if durable else "off",
        "full_page_writes": "on" if durable else "off",
    }
    command: list[str | Path] = [bindir / "postgres", "-D", data, "-p", str(port)]
    for name, value in settings.items():
        command += ["-c", f"{name}={value}"]
    with open(log, "wb") as out:
        if user is not None:
            os.chown(log, user.pw_uid, user.pw_gid)
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, **_as_user(user),
        )  # fmt: skip


def _as_user(user: pwd.struct_passwd | None) -> dict[str, Any]:
    if user is None:
        return {}
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": "/"}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "env": env, "cwd": "/"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
