"""Logging setup for the server: text for people, JSON lines for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
from typing import Literal


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def configure(level: str, fmt: Literal["text", "json"]) -> None:
    """Route fnserve's (and the frontends' libraries') logs to stderr in `fmt`."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # "N changes detected" for every save: fnserve logs each reload with its outcome instead.
    watchfiles_level = logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING
    logging.getLogger("watchfiles").setLevel(watchfiles_level)
