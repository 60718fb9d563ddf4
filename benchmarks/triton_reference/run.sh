#!/usr/bin/env bash
# Take fnserve's Triton reference again: start the tritonserver that PyTriton bundles (CPU only,
# explicit model control, the python-backend `identity` of ./repo), send traffic, unload the
# model and ask every lookup, and scrape /metrics. Writes the transcripts to $OUT.
#
# Needs the anchors kit's Triton venv, which lives OUTSIDE this repository: build it with
# ../shared/anchors/setup.sh (section 2 of its README) or by hand:
#   python3 -m venv /tmp/anchors/venv-triton
#   /tmp/anchors/venv-triton/bin/pip install nvidia-pytriton==0.7.0 "tritonclient[all]==2.73.0"
# Usage: benchmarks/triton_reference/run.sh [OUT]   (VENV=..., PORT=18800 to override)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${VENV:-/tmp/anchors/venv-triton}
out=${1:-/tmp/triton_reference}
port=${PORT:-18800}
py="$venv/bin/python"
if [[ ! -x "$py" ]] || ! "$py" -c "import pytriton, tritonclient" 2>/dev/null; then
    echo "run.sh: no Triton venv at $venv (needs nvidia-pytriton==0.7.0 and tritonclient);" \
         "build it with ../shared/anchors/setup.sh or set VENV" >&2
    exit 2
fi
pkg=$("$py" -c 'import pathlib, pytriton; print(pathlib.Path(pytriton.__file__).parent)')
libs="$pkg/../nvidia_pytriton.libs"  # libcudart & co. the backend stub links against
pylib=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p "$out"
backends=$(mktemp -d)
cp -r "$pkg/tritonserver/backends/python" "$backends/python"
cp "$pkg/tritonserver/python_backend_stubs/$pyver/triton_python_backend_stub" "$backends/python/"
export LD_LIBRARY_PATH="$pylib:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$venv/bin:$PATH"  # the stub runs the venv's python (numpy)
"$pkg/tritonserver/bin/tritonserver" --model-repository="$here/repo" \
    --backend-directory="$backends" --model-control-mode=explicit --load-model=identity \
    --http-address=127.0.0.1 --http-port="$port" --grpc-address=127.0.0.1 \
    --grpc-port=$((port + 1)) --metrics-address=127.0.0.1 --metrics-port=$((port + 2)) \
    --allow-metrics=true --allow-cpu-metrics=true --allow-gpu-metrics=false \
    >"$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$backends"' EXIT
for _ in $(seq 60); do
    curl -sf "127.0.0.1:$port/v2/models/identity/ready" >/dev/null && break
    kill -0 "$server" 2>/dev/null || { echo "run.sh: tritonserver exited, see $out/server.log" >&2; exit 1; }
    sleep 1
done
ports=("$port" $((port + 1)) $((port + 2)))
{
    echo "# tritonserver $(grep -oP 'server_version\s*\|\s*\K[0-9.]+' "$out/server.log"), $(date -u +%FT%TZ)"
    echo "# command: benchmarks/triton_reference/run.sh (explicit model control, repo/identity)"
} | tee "$out/header.txt"
"$py" "$here/probe.py" traffic "${ports[@]}" | tee "$out/traffic.txt"
"$py" "$here/probe.py" metrics "${ports[@]}" >"$out/metrics-after-traffic.txt"
"$py" "$here/probe.py" versions "${ports[@]}" | tee "$out/versions.txt"
"$py" "$here/probe.py" metrics "${ports[@]}" >"$out/metrics-after-reload.txt"
echo "transcripts in $out"
