#!/usr/bin/env bash
# The one prepared GPU session (issue 6): provenance, copy bandwidth, verify, the sweep (packed into $OUT at once),
# summarize → crossover → report, kernel bench, cuda tests — most important first, inside one time budget. Every
# stage runs even if an earlier one failed; a summary lists each stage's exit code. Everything lands in $OUT (or
# ./gpu-check-out) as at most 8 files: the device tool returns no more.
#
#   make gpu-check                 # BACKEND=cuda, CONFIG=configs/h200.yaml
#   make gpu-check BACKEND=cpu     # rehearsal on a CPU box (CONFIG defaults to configs/cpu-smoke.yaml)
#   DRY_RUN=1 bash scripts/gpu_check.sh   # checks every stage's command, the config and (cuda) an NVRTC compile
#   BUDGET_S=500                          # the script's own deadline; keep it under the device call's timeout_s
#
# It installs nothing from the network. On a machine without the venv it uses python3 with PYTHONPATH=repo and, if
# present, wheels carried in .whl/ (pydantic and friends for the H200 image) installed to /tmp/site with --no-index.
set -u
cd "$(dirname "$0")/.."
BACKEND=${BACKEND:-cuda}
case "$BACKEND" in
  cuda) DEFAULT_CONFIG=configs/h200.yaml ;;
  metal) DEFAULT_CONFIG=configs/m-series.yaml ;;
  *) DEFAULT_CONFIG=configs/cpu-smoke.yaml ;;
esac
CONFIG=${CONFIG:-$DEFAULT_CONFIG}
OUT=${OUT:-gpu-check-out}
DRY_RUN=${DRY_RUN:-0}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
: >"$LOG"
RUN_DIR=${RUN_DIR:-results/_scratch/gpu-check-$BACKEND}

if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
MOECAL="$PY -m harness"

declare -a SUMMARY=()
log() { printf '%s\n' "$*" | tee -a "$LOG"; }

# Time: the device call is killed at its timeout, so the script keeps its own deadline (BUDGET_S, default 500 s:
# under a ~540 s timeout_s) and orders stages by what must come back: the sweep is packed into $OUT as soon as it
# ends, and the stages after it only use what time is left. A stage gets min(its limit, time left).
BUDGET_S=${BUDGET_S:-500}
left() { echo $((BUDGET_S - SECONDS)); }

# stage NAME LIMIT_S COMMAND...: run one stage, keep going whatever happens, remember its exit code.
stage() {
  local name=$1 limit=$2
  shift 2
  log ""
  log "=== $name: $*"
  if [ "$DRY_RUN" = 1 ]; then
    SUMMARY+=("$name: planned")
    return 0
  fi
  local budget
  budget=$(left)
  [ "$limit" -lt "$budget" ] || limit=$budget
  if [ "$limit" -lt 5 ]; then
    SUMMARY+=("$name: skipped, no time left")
    log "--- $name: skipped, no time left"
    return 0
  fi
  local started=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  SUMMARY+=("$name: exit $rc in $((SECONDS - started)) s (limit $limit s)")
  log "--- $name: exit $rc in $((SECONDS - started)) s (limit $limit s)"
}

log "moecal gpu-check: backend=$BACKEND config=$CONFIG out=$OUT budget=${BUDGET_S}s python=$($PY --version 2>&1) $(date -u +%FT%TZ)"
if [ "$DRY_RUN" = 1 ]; then
  # rehearsal: every command must parse its arguments and the config must validate, or we stop here (exit 1)
  for sub in doctor verify bench-kernels sweep summarize crossover report; do
    $MOECAL "$sub" --help >/dev/null 2>&1 || { log "dry run: 'moecal $sub --help' failed"; exit 1; }
  done
  if ! $MOECAL sweep "$CONFIG" --backend "$BACKEND" --dry-run >>"$LOG" 2>&1; then
    # no such device here (the usual rehearsal): validate the config against the CPU backend instead
    log "dry run: backend $BACKEND not usable here; validating $CONFIG on the cpu backend"
    $MOECAL sweep "$CONFIG" --backend cpu --dry-run >>"$LOG" 2>&1 || { log "dry run: config check failed"; exit 1; }
  fi
  if [ "$BACKEND" = cuda ]; then
    $MOECAL verify --backend cuda --compile-only >>"$LOG" 2>&1 || { log "dry run: CUDA compile check failed"; exit 1; }
  fi
fi

case "$BACKEND" in
  cuda) TESTS=(-m cuda tests); DTYPE=bfloat16 ;;
  metal) TESTS=(-m metal tests); DTYPE=bfloat16 ;;
  *) TESTS=(tests/test_cpu_backend.py tests/test_verify_cli.py); DTYPE=float32 ;;  # the CPU backend's own tests
esac
ANALYSIS_RESERVE=75  # seconds kept after the sweep for pack, summarize, crossover and report
stage provenance 20 bash -c "nvidia-smi 2>/dev/null || true; $PY -c 'import platform; print(platform.platform())'; $MOECAL doctor"
stage copy-bandwidth 40 $MOECAL doctor --backend "$BACKEND" --bandwidth
stage verify 90 bash -c "$MOECAL verify --backend $BACKEND --json > '$OUT/verify.json'"
stage sweep $(($(left) - ANALYSIS_RESERVE)) $MOECAL sweep "$CONFIG" --backend "$BACKEND" --out "$RUN_DIR" --no-report
stage pack 15 tar -czf "$OUT/run.tar.gz" -C "$(dirname "$RUN_DIR")" "$(basename "$RUN_DIR")"
stage summarize 15 $MOECAL summarize "$RUN_DIR"
stage crossover 15 bash -c "$MOECAL crossover '$RUN_DIR' --json > '$OUT/crossover.json'"
stage report 30 $MOECAL report "$RUN_DIR" --out "$OUT"
stage bench-kernels 120 $MOECAL bench-kernels --backend "$BACKEND" --dtype "$DTYPE" --out "$OUT/bench_kernels.csv"
stage "pytest-$BACKEND" 240 $PY -m pytest -q -p no:cacheprovider "${TESTS[@]}"

log ""
log "=== summary"
for line in "${SUMMARY[@]}"; do log "  $line"; done
log "files in $OUT:"
ls -la "$OUT" | tee -a "$LOG"
