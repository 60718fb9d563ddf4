#!/usr/bin/env bash
# Measure fnserve beside PyTriton (real Triton 2.51) with the shared anchors kit, in one run.
#
#   bash benchmarks/anchors.sh                 # identity + mlp, h2load HTTP/1.1 JSON + gRPC, c=1,8,64
#   REPEAT=3 bash benchmarks/anchors.sh        # three fresh-server sweeps per point (report shows medians)
#   SYSTEMS="fnserve" bash benchmarks/anchors.sh
#
# Servers are pinned to core 0, load generators (h2load, C) to core 1; every sweep starts a fresh
# server. The kit lives in ../shared/anchors (read-only), so it is copied to $KIT first; its venvs
# (PyTriton + tritonclient) go to $ANCHORS_DIR as the kit's setup.sh does. Results append to
# $KIT/results/results.jsonl and the tables print at the end (report.py, medians over runs).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${ANCHORS_SRC:-$ROOT/../shared/anchors}
KIT=${KIT:-/tmp/fnserve-anchors-kit}
export ANCHORS_DIR=${ANCHORS_DIR:-/tmp/anchors}
REPEAT=${REPEAT:-1}
SYSTEMS=${SYSTEMS:-"pytriton fnserve"}
RUN_ID=${RUN_ID:-fnserve-$(date +%Y%m%dT%H%M%S)}

if [ ! -d "$KIT" ] && [ ! -f "$SRC/run_all.sh" ]; then
  echo "benchmarks/anchors.sh: the anchors kit is not at $SRC (it lives outside this repository," \
       "beside the checkout as ../shared/anchors); set ANCHORS_SRC=/path/to/anchors" >&2
  exit 2
fi
[ -x "$ROOT/.venv/bin/fnserve" ] || make -C "$ROOT" install
if [ ! -d "$KIT" ]; then
  cp -r "$SRC" "$KIT" && chmod -R u+w "$KIT"
  # The shared results are the kit's history; this run starts its own file.
  : > "$KIT/results/results.jsonl"
fi
[ -x "$ANCHORS_DIR/venv-triton/bin/python" ] || bash "$KIT/setup.sh" triton

for i in $(seq 1 "$REPEAT"); do
  for system in $SYSTEMS; do
    FNSERVE_BIN="$ROOT/.venv/bin/fnserve" MODELS=${MODELS:-"identity mlp"} LOADGENS=${LOADGENS:-"h1 h2grpc"} \
      RUN_ID="$RUN_ID" bash "$KIT/run_all.sh" "$system"
  done
done
python3 "$KIT/report.py" --runs "$RUN_ID" --results "$KIT/results/results.jsonl"
