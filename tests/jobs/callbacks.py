"""A loopback HTTP server that receives job completion callbacks in the tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CallbackReceiver:
    """A loopback HTTP server that records the JSON POSTed to it; answers `status` to the
    first `fail_first` posts (to exercise retries)."""

    def __init__(self, fail_first: int = 0, status: int = 500) -> None:
        self.received: list[dict[str, Any]] = []
        self.attempts = 0
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.attempts += 1
                if receiver.attempts <= fail_first:
                    self.send_response(status)
                else:
                    receiver.received.append(json.loads(body))
                    receiver.arrived.set()
                    self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/done"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
