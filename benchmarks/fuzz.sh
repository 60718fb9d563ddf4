#!/usr/bin/env bash
# A longer fuzz campaign than the fixed-seed one `make test` runs: the same properties
# (tests/fuzz: HTTP JSON and binary codecs, Content-Encoding, gRPC codec, config parser,
# schemathesis against docs/openapi.yaml), many more examples, a random seed, and hypothesis's
# example database (.hypothesis/) so a failure found once is replayed first next time.
#
#   benchmarks/fuzz.sh                 # 20,000 examples per property (tens of minutes)
#   FNSERVE_FUZZ_EXAMPLES=2000 benchmarks/fuzz.sh -k grpc   # fewer, one area
#
# Extra arguments go to pytest. Exits non-zero on the first property that fails, printing the
# falsifying example and a @reproduce_failure blob.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
export FNSERVE_FUZZ_PROFILE=long
export FNSERVE_FUZZ_EXAMPLES="${FNSERVE_FUZZ_EXAMPLES:-20000}"
exec "$PYTHON" -m pytest tests/fuzz -x -q -o timeout=0 "$@"
