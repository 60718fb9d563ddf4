"""Locust users for any KServe v2 / Triton server: HTTP JSON, HTTP binary tensors and gRPC.

Pick one user class and name the model; the model's metadata fills in datatypes and shapes:

    locust -f loadtest/locustfile.py KServeHttpJsonUser --host http://127.0.0.1:8000 --model mlp
    locust -f loadtest/locustfile.py KServeGrpcUser --host 127.0.0.1:8001 --model mlp \\
        --headless -u 8 -r 8 -t 30s
    # variable dimensions, perf_analyzer data files, batches:
    #   --shape "INPUT0:256"  --input-data data.json  --batch-size 4

`fnserve bench MODEL` runs the same users headless, one step per concurrency, and prints
perf_analyzer's report (server-side breakdown, integrity check, CSV and chart).
"""

from fnserve.bench.users import KServeGrpcUser, KServeHttpBinaryUser, KServeHttpJsonUser

__all__ = ["KServeGrpcUser", "KServeHttpBinaryUser", "KServeHttpJsonUser"]
