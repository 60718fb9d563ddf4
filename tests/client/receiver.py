"""A tiny HTTP server that records the JSON documents POSTed to it (job completion callbacks)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Received:
    """The callbacks one receiver got, in arrival order."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.documents: queue.Queue[dict[str, Any]] = queue.Queue()

    def next(self, timeout_s: float = 20) -> dict[str, Any]:
        return self.documents.get(timeout=timeout_s)


@contextmanager
def callback_receiver() -> Iterator[Received]:
    """Listen on a free loopback port; yields where to send callbacks and what arrived."""
    received: Received

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            received.documents.put(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received = Received(f"http://127.0.0.1:{server.server_address[1]}/done")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
