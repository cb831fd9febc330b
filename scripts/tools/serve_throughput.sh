#!/usr/bin/env bash
# Aggregate generation throughput: llama-server directly vs `tqgguf serve` fronting the same
# llama-server binary with the same flags (and, optionally, the old in-process server).
#
#   scripts/tools/serve_throughput.sh LLAMA_SERVER MODEL
#
# LLAMA_SERVER: a llama-server binary built from the patched tree (`tqgguf build --backend cuda`
# puts one in ~/.cache/tqgguf/build/tools-cuda/bin/llama-server). MODEL: a GGUF path.
# Settings (environment, defaults = the GPU acceptance run of issue 13):
#   CLIENTS=32 TOKENS=128 REQUESTS=1 NP=32 NGL=99 CTK=turbo4 CTV=turbo4 CTX=512 (per slot) THREADS=
#   REPEAT=5                       measured runs per server (after one warm-up request per client
#                                  connection); each run is logged, the table shows the median
#   TQGGUF="tqgguf"                command that runs the new tqgguf
#   OLD_TQGGUF=""                  command that runs the old tqgguf (e.g. "env PYTHONPATH=/path/to/main python -m tqgguf");
#                                  empty = skip it
#   PY=python3                     python with httpx, for scripts/tools/serve_load.py
#   OUT=serve_throughput-<time>    directory for the logs and results.jsonl
#   READY_TIMEOUT=600              seconds a server may take to load
# Prints one line per server (median t/s, every run's t/s, the server process's CPU per request:
# for tqgguf serve that is the front alone, its llama-server child is another process) and the
# ratios of the medians; exits non-zero with the log tail when a server fails.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
LS=$1 MODEL=$2
[[ -x $LS ]] || { echo "error: $LS is not an executable llama-server" >&2; exit 2; }
[[ -f $MODEL ]] || { echo "error: model $MODEL not found" >&2; exit 2; }
CLIENTS=${CLIENTS:-32} TOKENS=${TOKENS:-128} REQUESTS=${REQUESTS:-1} NP=${NP:-32} NGL=${NGL:-99}
CTK=${CTK:-turbo4} CTV=${CTV:-turbo4} CTX=${CTX:-512} THREADS=${THREADS:-} REPEAT=${REPEAT:-5}
TQGGUF=${TQGGUF:-tqgguf} OLD_TQGGUF=${OLD_TQGGUF:-} PY=${PY:-python3} READY_TIMEOUT=${READY_TIMEOUT:-600}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-serve_throughput-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
PIDS=()

cleanup() {
  for p in "${PIDS[@]:-}"; do
    [[ -n $p ]] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ready() {  # pid url log
  local deadline=$((SECONDS + READY_TIMEOUT))
  while (( SECONDS < deadline )); do
    if ! kill -0 "$1" 2>/dev/null; then
      echo "error: server exited before it was ready; last lines of $3:" >&2; tail -20 "$3" >&2; return 1
    fi
    if "$PY" -c 'import sys, httpx; sys.exit(0 if httpx.get(sys.argv[1] + "/health", timeout=5).status_code == 200 else 1)' "$2" 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  echo "error: server not ready within ${READY_TIMEOUT}s; last lines of $3:" >&2; tail -20 "$3" >&2; return 1
}

measure() {  # label cmd...
  local label=$1; shift
  local port; port=$(free_port)
  local log="$OUT/$label.log" url="http://127.0.0.1:$port"
  echo "== $label: $* --port $port" >&2
  "$@" --port "$port" > "$log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_ready "$pid" "$url" "$log"
  "$PY" "$HERE/serve_load.py" "$url" --clients "$CLIENTS" --tokens "$TOKENS" --requests "$REQUESTS" \
    --repeat "$REPEAT" --cpu-pid "$pid" --json \
    | "$PY" -c 'import json, sys; d = json.load(sys.stdin); d["label"] = sys.argv[1]; print(json.dumps(d))' "$label" \
    | tee -a "$RESULTS" >&2
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

T=()
[[ -n $THREADS ]] && T=(-t "$THREADS")
# llama-server's -c is the total over -np slots; tqgguf's -c is per slot (it passes CTX*NP on)
measure llama-server "$LS" -m "$MODEL" --host 127.0.0.1 -ngl "$NGL" -ctk "$CTK" -ctv "$CTV" -fa on \
  -np "$NP" -c $((CTX * NP)) -fit off --no-webui --metrics --jinja "${T[@]}"
measure tqgguf-serve env TQGGUF_LLAMA_SERVER="$LS" $TQGGUF serve "$MODEL" -ngl "$NGL" --ctk "$CTK" --ctv "$CTV" -fa on \
  -np "$NP" -c "$CTX" --keep-alive -1 "${T[@]}"
if [[ -n $OLD_TQGGUF ]]; then
  measure old-tqgguf-serve $OLD_TQGGUF serve "$MODEL" -ngl "$NGL" --ctk "$CTK" --ctv "$CTV" -fa on \
    -np "$NP" -c "$CTX" --keep-alive -1 "${T[@]}"
fi

"$PY" - "$RESULTS" <<'PY'
import json, sys
rows = {r["label"]: r for r in map(json.loads, open(sys.argv[1]))}
print(f"{'server':<18} {'requests ok':>11} {'tokens':>7} {'wall s':>8} {'t/s':>9} {'CPU ms/req':>10}  runs (t/s)")
for label, r in rows.items():
    print(f"{label:<18} {r['requests_ok']:>11} {r['completion_tokens']:>7} {r['wall_s']:>8.2f} "
          f"{r['aggregate_tps_median']:>9.2f} {r.get('server_cpu_ms_per_request_median', float('nan')):>10.2f}  "
          + " ".join(f"{x:.0f}" for x in r["aggregate_tps_runs"])
          + (f"  errors: {len(r['errors'])}" if r["errors"] else ""))
print(f"(median of {next(iter(rows.values()))['repeat']} runs each; CPU: the server process alone, "
      "for tqgguf serve its front without the llama-server child)")
direct, front = rows.get("llama-server"), rows.get("tqgguf-serve")
if direct and front and direct["aggregate_tps_median"]:
    print(f"tqgguf serve / llama-server = {front['aggregate_tps_median'] / direct['aggregate_tps_median']:.3f} "
          "(goal >= 0.9)")
old = rows.get("old-tqgguf-serve")
if front and old and old["aggregate_tps_median"]:
    print(f"tqgguf serve / old tqgguf serve = {front['aggregate_tps_median'] / old['aggregate_tps_median']:.2f} "
          "(goal >= 5)")
sys.exit(1 if any(r["errors"] for r in rows.values()) else 0)
PY
echo "logs and results: $OUT" >&2
