#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU: the default job on CUDA under launcher=local and
# launcher=threads, and mixed precision. Prints, per step, the run's "done:" line, its peak memory
# line, the exit code and the wall seconds, then a summary table; exits non-zero if a step failed.
#
#   scripts/gpu_check.sh                # from anywhere; runs from the repository root
#   STEP_TIMEOUT=1800 KEEP_HOME=1 scripts/gpu_check.sh
#
# Steps (default job: small CNN, Fashion-MNIST, AllReduce-SGD, network=off):
#   1. nvidia-smi summary, torch / CUDA / cuDNN / NCCL versions
#   2. launcher=local  nodes=1 train.device=cuda train.max_steps=200   (nccl, world size 1)
#   3. launcher=threads nodes=8 train.device=cuda train.max_steps=100  (8 ranks on the one GPU)
#   4. launcher=threads nodes=64 train.device=cuda train.batch_size=16 train.max_steps=50
#   5. step 2 with train.amp=true train.amp_dtype=fp16
# nodes=1 in steps 2 and 5: launcher=local gives every rank process a GPU of its own under nccl,
# so on one GPU it runs one worker (the default job's 4 would share cuda:0, which nccl refuses).
# Each run gets STEP_TIMEOUT seconds (default 900). Results go to a temporary DLCOMM_HOME,
# removed at the end unless KEEP_HOME=1.
# Exit codes: 0 all steps passed, 1 a step failed, 2 no usable GPU (or no venv).
set -u

cd "$(dirname "$0")/.." || exit 2

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no usable NVIDIA GPU here (nvidia-smi missing or failing); run this on a machine with a GPU" >&2
    exit 2
fi

if [ ! -x .venv/bin/dlcomm ]; then
    echo "gpu_check: .venv/bin/dlcomm missing: running 'make setup'" >&2
    make setup || { echo "gpu_check: 'make setup' failed" >&2; exit 2; }
fi
PY=.venv/bin/python
DLCOMM=.venv/bin/dlcomm

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    echo "gpu_check: torch.cuda is not available in .venv (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')); a CUDA build of torch and a working driver are needed" >&2
    exit 2
fi

STEP_TIMEOUT=${STEP_TIMEOUT:-900}
DLCOMM_HOME=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 2
export DLCOMM_HOME
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
if [ "${KEEP_HOME:-0}" = 1 ]; then
    echo "results under $DLCOMM_HOME (kept)"
else
    trap 'rm -rf "$DLCOMM_HOME"' EXIT
fi

echo "== 1. GPU and versions"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,utilization.gpu --format=csv,noheader
"$PY" - <<'EOF'
import torch
nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "n/a"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL {nccl}, "
      f"{torch.cuda.device_count()} device(s), device 0: {torch.cuda.get_device_name(0)}")
EOF
VERSIONS_RC=$?

NAMES=()
CODES=()
WALLS=()
ACCS=()

# run_step NAME OVERRIDES...: one `dlcomm train` run, its figures printed and remembered
run_step() {
    local name=$1
    shift
    local log="$DLCOMM_HOME/step$((${#NAMES[@]} + 2)).log"
    echo
    echo "== $((${#NAMES[@]} + 2)). $name"
    echo "dlcomm train $*"
    local start end rc wall acc
    start=$(date +%s.%N)
    timeout --kill-after=30 "$STEP_TIMEOUT" "$DLCOMM" train "$@" >"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    # the progress bar redraws after "\r": split there so grep sees the lines
    tr '\r' '\n' <"$log" | grep -E '^done:' | tail -n 1
    tr '\r' '\n' <"$log" | grep -E '^peak memory' | tail -n 1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "timed out after $STEP_TIMEOUT s"
    fi
    if [ "$rc" -ne 0 ]; then
        echo "--- last lines of its output ---"
        tr '\r' '\n' <"$log" | grep -v '^train:' | grep -v '^[[:space:]]*$' | tail -n 15
    fi
    acc=$(tr '\r' '\n' <"$log" | grep -E '^done:' | tail -n 1 | sed -nE 's/^done: test accuracy ([0-9.]+%|n\/a).*/\1/p')
    echo "exit code $rc, wall $wall s"
    NAMES+=("$name")
    CODES+=("$rc")
    WALLS+=("$wall")
    ACCS+=("${acc:-n/a}")
}

run_step "local, 1 worker, cuda, 200 steps" \
    launcher=local nodes=1 train.device=cuda train.max_steps=200
run_step "threads, 8 workers, cuda, 100 steps" \
    launcher=threads nodes=8 train.device=cuda train.max_steps=100
run_step "threads, 64 workers, cuda, batch 16, 50 steps" \
    launcher=threads nodes=64 train.device=cuda train.batch_size=16 train.max_steps=50
run_step "local, 1 worker, cuda, amp fp16, 200 steps" \
    launcher=local nodes=1 train.device=cuda train.amp=true train.amp_dtype=fp16 train.max_steps=200

echo
echo "== summary"
printf '%-4s %-48s %9s %9s %10s\n' step run "exit code" "wall s" accuracy
printf '%-4s %-48s %9s %9s %10s\n' 1 "GPU and versions" "$VERSIONS_RC" - -
failed=0
[ "$VERSIONS_RC" -eq 0 ] || failed=1
for i in "${!NAMES[@]}"; do
    printf '%-4s %-48s %9s %9s %10s\n' "$((i + 2))" "${NAMES[$i]}" "${CODES[$i]}" "${WALLS[$i]}" "${ACCS[$i]}"
    [ "${CODES[$i]}" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then
    echo "gpu_check: FAILED (a step exited non-zero)"
    exit 1
fi
echo "gpu_check: all steps passed"
exit 0
