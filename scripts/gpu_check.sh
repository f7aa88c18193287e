#!/usr/bin/env bash
# The one prepared GPU session (issue 6): provenance, copy bandwidth, verify, the sweep (packed into $OUT at once),
# summarize → crossover → report, the kernel A/B (bench-kernels once per kernel variant), cuda tests — most
# important first, inside one time budget. Every stage runs even if an earlier one failed; a summary lists each
# stage's exit code. Everything lands in $OUT (or ./gpu-check-out) as at most 8 files: the device tool returns no
# more.
#
#   make gpu-check                 # BACKEND=cuda, CONFIG=configs/h200.yaml
#   make gpu-check BACKEND=cpu     # rehearsal on a CPU box (CONFIG defaults to configs/cpu-smoke.yaml)
#   DRY_RUN=1 bash scripts/gpu_check.sh   # checks every stage's command, the config and (cuda) an NVRTC compile
#   BUDGET_S=500                          # the script's own deadline; keep it under the device call's timeout_s
#   AB_S=110                              # seconds kept from the sweep for the kernel A/B (0: no A/B)
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
RUN_DIR=${RUN_DIR:-results/_scratch/gpu-check-$BACKEND-$(date -u +%Y%m%dT%H%M%S)}  # a new run each time (--out must be new)

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

AB_S=${AB_S:-110}

# The kernel A/B: bench-kernels once per variant (environment → NVRTC defines and launch choices, no code change;
# each CSV records its variant in a column and in its provenance header), on a grid small enough for the budget:
# Mixtral's d_model 4096 / top 2 at Dff 512 (kernel A's grid is under an H200's 132 SMs, where split-K acts), 2048
# and 14336. Most informative first: the reference design (also the fused/fallback µs and GB/s per Dff), rows per
# warp, kernel B's act load, split-K. A variant that would start with no time left is skipped and listed so.
AB_VARIANTS=(
  "default:"
  "rows2:MOECAL_CUDA_ROWS=2"
  "act-dtype:MOECAL_CUDA_ACT=dtype"
  "splitk4:MOECAL_CUDA_SPLIT_K=4"
  "act-shared:MOECAL_CUDA_ACT=shared"
  "rows4:MOECAL_CUDA_ROWS=4"
  "rows2-act-dtype:MOECAL_CUDA_ROWS=2 MOECAL_CUDA_ACT=dtype"
)
# Two experts: a step reads its top 2 whatever n_experts is, and fewer experts cut the host-side generation of
# the rotated layer copies, which dominates a short bench. The CPU rehearsal runs a smaller grid.
AB_GRID=(--d-model 4096 --dff 512,2048,14336 --n-experts 2 --top-k 2 --rounds 5 --copy-mib 256)
[ "$BACKEND" = cuda ] || AB_GRID=(--d-model 2048 --dff 512,2048 --n-experts 2 --top-k 2 --rounds 3 --copy-mib 64)
AB_DIR=$(mktemp -d)

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
    for entry in "${AB_VARIANTS[@]}"; do  # each A/B environment must name a valid variant (no GPU needed)
      env ${entry#*:} $PY -c 'from harness.devices.backends.cuda import CudaBackend; print(CudaBackend().variant_label())' \
        >>"$LOG" 2>&1 || { log "dry run: A/B variant ${entry%%:*} is invalid"; exit 1; }
    done
  fi
fi

case "$BACKEND" in
  cuda) TESTS=(-m cuda tests); DTYPE=bfloat16 ;;
  metal) TESTS=(-m metal tests); DTYPE=bfloat16 ;;
  *) TESTS=(tests/devices/test_cpu_backend.py tests/cli/test_verify_cli.py); DTYPE=float32 ;;  # the CPU backend's own tests
esac
ANALYSIS_RESERVE=75  # seconds kept after the sweep for pack, summarize, crossover and report
stage provenance 20 bash -c "nvidia-smi 2>/dev/null || true; $PY -c 'import platform; print(platform.platform())'; $MOECAL doctor"
stage copy-bandwidth 40 $MOECAL doctor --backend "$BACKEND" --bandwidth
stage verify 90 bash -c "$MOECAL verify --backend $BACKEND --json > '$OUT/verify.json'"
stage sweep $(($(left) - ANALYSIS_RESERVE - AB_S)) $MOECAL sweep "$CONFIG" --backend "$BACKEND" --out "$RUN_DIR" --no-report
stage pack 15 tar -czf "$OUT/run.tar.gz" -C "$(dirname "$RUN_DIR")" "$(basename "$RUN_DIR")"
stage summarize 15 $MOECAL summarize "$RUN_DIR"
stage crossover 15 bash -c "$MOECAL crossover '$RUN_DIR' --json > '$OUT/crossover.json'"
stage report 30 $MOECAL report "$RUN_DIR" --out "$OUT"
if [ "$AB_S" -gt 0 ]; then
  for entry in "${AB_VARIANTS[@]}"; do
    [ "$BACKEND" = cuda ] || [ "${entry%%:*}" = default ] || continue  # variants are CUDA's; other backends: one run
    stage "ab-${entry%%:*}" 60 env ${entry#*:} $MOECAL bench-kernels --backend "$BACKEND" --dtype "$DTYPE" \
      "${AB_GRID[@]}" --out "$AB_DIR/bench-${entry%%:*}.csv"
  done
  stage pack-ab 10 tar -czf "$OUT/bench_ab.tar.gz" -C "$AB_DIR" .
fi
stage "pytest-$BACKEND" 240 $PY -m pytest -q -p no:cacheprovider "${TESTS[@]}"

log ""
log "=== summary"
for line in "${SUMMARY[@]}"; do log "  $line"; done
log "files in $OUT:"
ls -la "$OUT" | tee -a "$LOG"
