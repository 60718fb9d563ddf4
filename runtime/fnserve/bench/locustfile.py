"""The locustfile `fnserve bench --ui` runs; `loadtest/locustfile.py` is its plain-Locust twin."""

from fnserve.bench.users import KServeGrpcUser, KServeHttpBinaryUser, KServeHttpJsonUser

__all__ = ["KServeGrpcUser", "KServeHttpBinaryUser", "KServeHttpJsonUser"]
