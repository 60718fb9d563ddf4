#!/usr/bin/env bash
# How far to trust Locust: `fnserve bench` (Locust) beside h2load (C) on the anchor MLP.
#
#   bash benchmarks/locust_vs_h2load.sh                      # c = 1 8 64, 10 s per point
#   REPEAT=3 DURATION=10 bash benchmarks/locust_vs_h2load.sh # three rounds (the summary shows each)
#
# Per round, each load generator gets a fresh server: `fnserve serve benchmarks/anchor_models.py`
# pinned to core $SERVER_CPUS with one BLAS thread. All load generators run on $LOADGEN_CPUS:
#   h2load    h2load --h1 -cN -m1 -t1 (N keep-alive HTTP/1.1 connections), per-request log
#   locust    fnserve bench mlp --json (one Locust process, N users)
#   workers   fnserve bench mlp --json --workers $WORKERS (Locust master + workers) on $WORKER_CPUS
# All send the same JSON body (the anchors' payload when present, else 256 seeded floats; Locust
# gets the same numbers as a perf_analyzer --input-data file). Each sweep records `other_cpu`:
# cores used during the sweep by processes outside the server and this script (other jobs);
# above ~0.1 the figures are disturbed and worth repeating; `steal` is CPU the hypervisor took
# from this VM in the same time (invisible to the processes). Output: $OUT/summary.md + raw files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
FNSERVE="$ROOT/.venv/bin/fnserve"
PORT=${PORT:-8650}  # HTTP; gRPC and metrics take the next two ports
CONCURRENCY=${CONCURRENCY:-"1 8 64"}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
REPEAT=${REPEAT:-1}
SERVER_CPUS=${SERVER_CPUS:-0}
LOADGEN_CPUS=${LOADGEN_CPUS:-1}
WORKERS=${WORKERS:-2}
WORKER_CPUS=${WORKER_CPUS:-$LOADGEN_CPUS}
PAYLOAD=${PAYLOAD:-/tmp/anchors/payloads/triton_mlp.json}
OUT=${OUT:-/tmp/locust_vs_h2load/$(date +%Y%m%dT%H%M%S)}
URL="http://127.0.0.1:$PORT/v2/models/mlp/infer"
mkdir -p "$OUT"
command -v h2load >/dev/null || { echo "h2load missing: apt-get install -y nghttp2-client" >&2; exit 1; }

# The request body for h2load, and the same numbers as --input-data for Locust.
"$PY" - "$PAYLOAD" "$OUT" <<'EOF'
import json, os, sys
import numpy as np
payload, out = sys.argv[1], sys.argv[2]
if os.path.exists(payload):
    row = json.load(open(payload))["inputs"][0]["data"]
else:
    row = np.random.default_rng(0).standard_normal(256).astype(np.float32).tolist()
json.dump({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 256], "data": row}]},
          open(f"{out}/body.json", "w"))
json.dump({"data": [{"INPUT0": row}]}, open(f"{out}/input_data.json", "w"))
EOF

# CPU accounting: every process's ticks, to charge what ran beside the benchmark to `other`.
cat > "$OUT/cpu.py" <<'EOF'
import json, os, sys, time
def snap():
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                data = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            rest = data[data.rfind(")") + 2:].split()
            procs[int(d)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
    steal = int(open("/proc/stat").readline().split()[8])  # time the hypervisor took away
    return {"t": time.monotonic(), "procs": procs, "steal": steal}
def tree(procs, roots):
    kids, out = {}, set(roots)
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    todo = list(roots)
    while todo:
        for kid in kids.get(todo.pop(), []):
            out.add(kid); todo.append(kid)
    return out
if sys.argv[1] == "snap":
    json.dump(snap(), open(sys.argv[2], "w"))
else:  # other A B ROOT_PIDS...: cores used outside the given process trees
    a, b = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
    pa = {int(k): v for k, v in a["procs"].items()}
    pb = {int(k): v for k, v in b["procs"].items()}
    mine = tree(pb, [int(p) for p in sys.argv[4:]]) | tree(pa, [int(p) for p in sys.argv[4:]])
    ticks = sum(v[1] - pa[p][1] for p, v in pb.items() if p in pa and p not in mine)
    per_s = os.sysconf("SC_CLK_TCK") * (b["t"] - a["t"])
    print(f"{ticks / per_s:.3f} (steal {(b['steal'] - a['steal']) / per_s:.3f})")
EOF

SERVER_PID=""
start_server() {
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 setsid taskset -c "$SERVER_CPUS" \
    "$FNSERVE" serve "$ROOT/benchmarks/anchor_models.py" --http-port "$PORT" \
    --grpc-port $((PORT + 1)) --metrics-port $((PORT + 2)) --log-level warning \
    >"$OUT/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "server did not start, see $OUT/server.log" >&2; exit 1
}
stop_server() { kill -TERM -- "-$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
trap stop_server EXIT
other_cpu() { "$PY" "$OUT/cpu.py" other "$1" "$2" "$SERVER_PID" $$; }

h2load_sweep() {  # $1: round
  for c in $CONCURRENCY; do
    local log="$OUT/r$1_h2load_c$c.tsv"
    "$PY" "$OUT/cpu.py" snap "$OUT/a.json"
    /usr/bin/time -f "%U %S %e" -o "$OUT/r$1_h2load_c$c.time" taskset -c "$LOADGEN_CPUS" \
      h2load --h1 -c "$c" -m1 -t1 -D "$DURATION" --warm-up-time="$WARMUP" -d "$OUT/body.json" \
      -H 'content-type: application/json' --log-file="$log" "$URL" >"$OUT/r$1_h2load_c$c.txt"
    "$PY" "$OUT/cpu.py" snap "$OUT/b.json"
    echo "$(other_cpu "$OUT/a.json" "$OUT/b.json")" >"$OUT/r$1_h2load_c$c.other"
  done
}

locust_sweep() {  # $1: round, $2: name, $3: cpus, then extra fnserve bench options
  local round=$1 name=$2 cpus=$3
  shift 3
  "$PY" "$OUT/cpu.py" snap "$OUT/a.json"
  taskset -c "$cpus" "$FNSERVE" bench mlp --url "127.0.0.1:$PORT" --json \
    --input-data "$OUT/input_data.json" --concurrency "$(echo "$CONCURRENCY" | tr ' ' ,)" \
    --duration "$DURATION" --warmup "$WARMUP" --csv "$OUT/r${round}_$name.csv" \
    --plot "$OUT/r${round}_$name.png" "$@" >"$OUT/r${round}_$name.txt" || true
  "$PY" "$OUT/cpu.py" snap "$OUT/b.json"
  echo "$(other_cpu "$OUT/a.json" "$OUT/b.json")" >"$OUT/r${round}_$name.other"
}

echo "results in $OUT"
for round in $(seq "$REPEAT"); do
  start_server; h2load_sweep "$round"; stop_server
  start_server; locust_sweep "$round" locust "$LOADGEN_CPUS"; stop_server
  start_server; locust_sweep "$round" workers "$WORKER_CPUS" --workers "$WORKERS"; stop_server
done

"$PY" - "$OUT" "$REPEAT" "$CONCURRENCY" "$DURATION" <<'EOF'
import csv, math, sys
out, repeat, levels, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), float(sys.argv[4])
def pct(values, q):
    return values[max(0, math.ceil(q / 100 * len(values)) - 1)]
lines = ["| round | load generator | c | infer/s | p50 ms | p90 ms | p95 ms | p99 ms | "
         "load gen CPU | other CPU (steal) |", "|---|---|---|---|---|---|---|---|---|---|"]
for r in range(1, repeat + 1):
    for c in levels:
        lat = sorted(int(l.split()[2]) / 1000 for l in open(f"{out}/r{r}_h2load_c{c}.tsv")
                     if l.split()[1] == "200")
        user, system, wall = map(float, open(f"{out}/r{r}_h2load_c{c}.time").read().split()[-3:])
        other = open(f"{out}/r{r}_h2load_c{c}.other").read().strip()
        lines.append(f"| {r} | h2load --h1 | {c} | {len(lat) / duration:.0f} | "
                     + " | ".join(f"{pct(lat, q):.2f}" for q in (50, 90, 95, 99))
                     + f" | {(user + system) / wall:.0%} | {other} |")
    for name, label in (("locust", "Locust, 1 process"), ("workers", "Locust --workers")):
        other = open(f"{out}/r{r}_{name}.other").read().strip()
        for row in csv.DictReader(open(f"{out}/r{r}_{name}.csv")):
            bound = (" (CPU-bound)" if row["client_cpu_bound"] == "True"
                     else " (busy)" if row.get("client_cpu_busy") == "True" else "")
            lines.append(f"| {r} | {label} | {row['concurrency']} | {float(row['infer_per_s']):.0f} | "
                         + " | ".join(f"{float(row[f'p{q}_ms']):.2f}" for q in (50, 90, 95, 99))
                         + f" | {float(row['client_cpu_busiest']):.0%} busiest, "
                         f"{float(row['client_cpu_total']):.2f} total{bound} | {other} |")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
