#!/usr/bin/env bash
# What one GPU can show about dlcomm's GPU path (issue 33, item 9). Prints one table at the end
# (check, status, seconds, note) and exits non-zero if a row failed.
#
#   scripts/gpu_check.sh                      # on a machine with an NVIDIA GPU (from anywhere)
#   scripts/gpu_check.sh --cpu                # the same rows with train.device=cpu where they mean
#                                             # something there (or GPU_CHECK_CPU=1); the GPU-only
#                                             # rows are skipped
#   scripts/gpu_check.sh dataset.root=/data/fashion-mnist    # extra overrides go to every run
#
# Rows (the default job: small CNN, Fashion-MNIST, batch 64 per worker; every run is `dlcomm train`):
#   * dlcomm doctor; CUDA visible to torch (nvidia-smi, torch.cuda) [GPU only]
#   * timing sanity: the default job at launcher=local nodes=1 (nccl on a GPU) for 60 steps; its
#     compute_s (timings.csv) against the same iteration in plain torch timed alone with CUDA
#     events (perf_counter under --cpu): zero_grad, forward, backward, the gradients averaged in
#     one flat bucket by all_reduce on a world-size-1 group, optimizer step; the fastest step
#     after 10 of warm-up on each side; ok within 10%. A failed comparison is repeated (the run
#     too) up to TIMING_ATTEMPTS times (3), so that another process's load is not taken for an
#     error; the note says which attempt passed. Under --cpu: 100 steps, 5 of warm-up, one thread.
#   * world-size-1 NCCL: launcher=local nodes=1 launcher.backend=nccl train.device=cuda [GPU only]
#   * performance (a table of its own after the checks; information: ok when the measurement ran):
#     - step overhead, small_cnn and resnet18 (cifar stem): scripts/bench_step_overhead.py, dlcomm's
#       step against the same step in plain torch, interleaved step by step in one process and in
#       separate processes (dlcomm train itself against a plain loop), launcher=local and threads,
#       batch 64, 200 steps each, one round (--cpu: batch 8, 50 steps); the ratios' target is <= 1.05
#     - 4 and 16 ranks on the one device: launcher=threads launcher.compute=serial, resnet18 (cifar
#       stem; --cpu: small_cnn), batch 64, 40 steps (--cpu: 10); its wall ms/iter against the serial
#       floor (N x one plain-torch step) and one batch of N x 64 in plain torch (bench_step_overhead.py
#       --plain-batches); these rows run alone, before the pool
#     - the compute profile's prediction (issue 56): scripts/gpu_profiles.sh for resnet18 (cifar stem)
#       batch 128: `dlcomm profile` on the GPU, then 4 ranks launcher.compute=serial network=off for
#       30 steps; their median measured compute_s within 10% of the profile's step [GPU only]
#     - compute modes (issue 60): scripts/bench_compute_modes.py, serial / parallel / batched / one
#       batch of N x 64 for resnet18 (cifar stem) and mlp at 4 and 16 ranks, 3 rounds (--cpu: the
#       784-200-200-10 mlp, batch 8); target on a GPU: 16 ResNet-18 ranks batched within 1.5x of
#       one batch of 16 x 64
#   * every algorithm (dlcomm's own registered ones, dlcomm.catalog, listed when the script runs: 15 on
#     2026-11-27, diloco and streaming_diloco included) for STEPS steps under launcher=threads, all
#     ranks on the one GPU, with launcher.semantics=gloo and with launcher.semantics=nccl; the nccl
#     row's note says whether its losses equal the gloo row's (information, not a pass/fail criterion)
#   * compress=lowbit (4-bit E3M0 outer gradients) with diloco and streaming_diloco, semantics=nccl,
#     algo.period=5 so that STEPS steps hold several outer steps (streaming_diloco's 2 fragments
#     and overlap 1 at their defaults)
#   * network=eth_10g network.mode=simulate on the device (allreduce, crossover, crossover_hier,
#     ps; semantics=nccl): the simulated clock must read a positive compute and iteration time
#   * train.amp=true train.amp_dtype=fp16 per algorithm family: allreduce, dpsgd (gossip),
#     crossover_hier (hierarchical); ps (parameter server) with bf16, since it refuses fp16 loss
#     scaling (its server would apply the workers' scaled gradients)
#
# Environment: STEPS (20; 5 under --cpu), ROW_TIMEOUT (seconds per row: 150; 300 under --cpu),
# DEADLINE (seconds for the whole script: 510, so it ends inside a 10-minute limit; 1800 under
# --cpu; a row is started only with at least 30 s left, and its timeout never passes the deadline),
# JOBS (rows run at once: 3 on a GPU, 1 under --cpu; the timing row always runs alone), ONLY (an
# extended regex: only the rows whose check matches run, e.g. ONLY='amp|timing'), KEEP_HOME=1
# (keep the temporary DLCOMM_HOME with every row's log and results). Results never go to the
# repository's results/: every row gets its own DLCOMM_HOME under a temporary folder.
# Setup: without .venv the script runs `make setup`, which reads TORCH, SITE_PYTHON and WHEELHOUSE
# from the environment: on a GPU node with its own PyTorch and no internet (the node dlcomm first ran
# on), `TORCH=site WHEELHOUSE=<wheels made by make wheelhouse> scripts/gpu_check.sh` builds the venv
# over the node's torch from the wheels alone (docs/slurm.md, "The site's PyTorch, and a compute
# node without internet"); dry-run it on a CPU machine with --cpu first.
# Exit codes: 0 every row ok or skipped, 1 a row failed, 2 no usable GPU without --cpu (or no venv).
set -u

CPU=0
EXTRA=()
for arg in "$@"; do
    case "$arg" in
        --cpu) CPU=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        -*) echo "gpu_check: unknown option $arg (use --cpu, or pass dlcomm overrides such as dataset.root=...)" >&2; exit 2 ;;
        *) EXTRA+=("$arg") ;;
    esac
done
[ "${GPU_CHECK_CPU:-0}" = 1 ] && CPU=1

cd "$(dirname "$0")/.." || exit 2
if [ ! -x .venv/bin/dlcomm ]; then
    echo "gpu_check: .venv/bin/dlcomm missing: running 'make setup'${TORCH:+ TORCH=$TORCH}${WHEELHOUSE:+ WHEELHOUSE=$WHEELHOUSE}" >&2
    make setup || { echo "gpu_check: 'make setup' failed" >&2; exit 2; }
fi
PY=$PWD/.venv/bin/python
DLCOMM=$PWD/.venv/bin/dlcomm

if [ "$CPU" = 1 ]; then
    DEVICE=cpu
    STEPS=${STEPS:-5}
    ROW_TIMEOUT=${ROW_TIMEOUT:-300}
    DEADLINE=${DEADLINE:-1800}
    JOBS=${JOBS:-1}
    TIMING_STEPS=100
    TIMING_WARMUP=5
    # one torch thread: on a shared CPU another process's load stalls a multi-threaded (OpenMP)
    # step 10-20x at random, on either side of the comparison
    TIMING_THREADS=train.threads_per_rank=1
    TIMING_ATTEMPTS=${TIMING_ATTEMPTS:-3}
    PERF_OVERHEAD="--batch 8 --steps 50 --warmup 5 --rounds 1"  # resnet18 at batch 64 takes ~1 s a step on 2 cores
    # the plain steps with every core, as serial compute gives the rank whose turn it is
    PERF_MODEL=small_cnn PERF_STEPS=10 PERF_PLAIN="--steps 10 --warmup 3 --threads $(nproc)"
    PERF_MODES="--models mlp --mlp-hidden 200 200 --batch 8 --ranks 4 16 --rounds 3"
else
    DEVICE=cuda
    STEPS=${STEPS:-20}
    ROW_TIMEOUT=${ROW_TIMEOUT:-150}
    DEADLINE=${DEADLINE:-510}
    JOBS=${JOBS:-3}
    TIMING_STEPS=60
    TIMING_WARMUP=10
    TIMING_THREADS=""
    TIMING_ATTEMPTS=${TIMING_ATTEMPTS:-3}
    PERF_OVERHEAD="--steps 200 --warmup 20 --rounds 1"
    PERF_MODEL=resnet18 PERF_STEPS=40 PERF_PLAIN="--steps 40 --warmup 10"
    PERF_MODES="--models resnet18 mlp --batch 64 --ranks 4 16 --rounds 3"
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
        echo "gpu_check: no usable NVIDIA GPU here (nvidia-smi missing or failing); run this on a machine with a GPU, or scripts/gpu_check.sh --cpu" >&2
        exit 2
    fi
    if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
        echo "gpu_check: torch.cuda is not available in .venv (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')); a CUDA build of torch and a working driver are needed (dlcomm doctor says which)" >&2
        exit 2
    fi
fi

BASE=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 2
if [ "${KEEP_HOME:-0}" = 1 ]; then
    echo "gpu_check: every row's log and results under $BASE (kept)"
else
    trap 'rm -rf "$BASE"' EXIT
fi
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
export GPU_CHECK_SCRIPTS=$PWD/scripts  # helpers.py's plain-torch step: benchlib.PlainStep
STARTED=$(date +%s)

# ---- the checks that read a run's timings.csv ----------------------------------------------------
cat >"$BASE/helpers.py" <<'EOF'
"""gpu_check.sh's readings: python helpers.py <what> ...; prints one line, exit 1 on a failed check."""
import json
import math
import os
import re
import statistics
import sys
from pathlib import Path

import pandas as pd


def timings(run_dir):
    return pd.read_csv(Path(run_dir) / "timings.csv")


def simulated(run_dir):
    rows = timings(run_dir)
    sim, compute = rows["sim_time_s"].median(), rows["sim_compute_s"].median()
    if not (math.isfinite(sim) and math.isfinite(compute) and sim > 0 and compute > 0 and sim >= compute):
        print(f"simulated clock wrong: median sim_time_s {sim}, sim_compute_s {compute}")
        return 1
    print(f"simulated {sim * 1e3:.1f} ms/iter, compute {compute * 1e3:.1f} ms")
    return 0


def compare(gloo_dir, nccl_dir):
    a, b = (timings(d).sort_values(["step", "rank"])["loss"].tolist() for d in (gloo_dir, nccl_dir))
    if a == b:
        print(f"losses = gloo's ({len(a)} rows)")
    elif len(a) != len(b):
        print(f"{len(b)} loss rows, gloo's run {len(a)}")
    else:
        print(f"losses differ from gloo's (max |diff| {max(abs(x - y) for x, y in zip(a, b)):.2g})")
    return 0


def timing(run_dir, device_name, warmup, *overrides):
    """The same step as dlcomm's iteration, in plain torch and timed alone: zero_grad, forward,
    backward, the gradients averaged over the job's one rank (one flat bucket, all_reduce on a
    world-size-1 group of the job's backend, as AllReduce-SGD does), optimizer step, for the
    model and optimizer dlcomm builds and one batch of the job's shape; CUDA events on the current
    stream (one event sync per step, as dlcomm's timer) or perf_counter on the CPU. The
    fastest step after the warm-up on each side: robust to other processes' load, while a
    systematic error (a region timed on the wrong stream, transfers charged as compute, host
    overhead the step alone does not have) shows in every step."""
    from time import perf_counter

    import torch

    from dlcomm.compose import compose
    from dlcomm.data import build_dataset
    from dlcomm.launch.rank import threads_per_rank
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer

    warmup = int(warmup)
    cfg = compose(list(overrides))
    torch.set_num_threads(threads_per_rank(cfg.train.threads_per_rank, 1))
    device = torch.device(device_name)
    if device.type == "cuda":  # the device a local rank of one gets (dlcomm.launch.rank.resolve_device)
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    data = build_dataset(cfg.dataset)
    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    model = task.build_model(cfg.model, data).to(device)
    optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
    model.train()
    import torch.distributed as dist

    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0,
                            world_size=1, device_id=device if device.type == "cuda" else None)
    sys.path.insert(0, os.environ["GPU_CHECK_SCRIPTS"])
    from benchlib import PlainStep

    world = dist.get_world_size()  # no collective at world size 1: dlcomm's Channel calls none on a group of one
    step = PlainStep(model, optimizer, task.loss, dist.all_reduce if world > 1 else None, world)
    batch = cfg.train.batch_size
    inputs = torch.randn(batch, *data.input_shape, device=device)
    labels = torch.randint(0, data.num_classes, (batch,), device=device)
    rows = timings(run_dir)
    cuda = device.type == "cuda"
    seconds = []
    for _ in range(max(int(rows["step"].max()) + 1, 300)):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            began = perf_counter()
        step(inputs, labels)
        if cuda:
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            seconds.append(perf_counter() - began)
    alone = seconds[warmup:]
    dlcomm = rows.loc[rows["step"] >= warmup, "compute_s"].tolist()
    ratio = min(dlcomm) / min(alone)
    median = statistics.median(dlcomm) / statistics.median(alone)
    clock = "CUDA events" if cuda else "perf_counter"
    print(f"compute_s {min(dlcomm) * 1e3:.2f} ms / alone ({clock}) {min(alone) * 1e3:.2f} ms = {ratio:.3f} "
          f"(fastest after {warmup} warm-up steps, of {len(dlcomm)} and {len(alone)}; medians: {median:.3f}); "
          "ok within 10%")
    dist.destroy_process_group()
    return 0 if abs(ratio - 1) <= 0.10 else 1


def overhead(path):
    """The performance table's lines of one bench_step_overhead.py --json."""
    for name, s in json.loads(Path(path).read_text()).items():
        if name != "args":
            a, b = s["interleaved"], s["separate"]
            print(f"step overhead {name:<22} interleaved dlcomm {a['dlcomm_ms']:.3f} / plain {a['plain_ms']:.3f} "
                  f"= {a['ratio']:.3f}, separate processes {b['dlcomm_ms']:.3f} / {b['plain_ms']:.3f} = {b['ratio']:.3f} "
                  "(medians)")
    return 0


def ranks(n, done_line, plain_path):
    """N ranks on the one device against the serial floor (N x one plain step) and one plain batch of N x 64."""
    n = int(n)
    wall = re.search(r"wall ([0-9.,]+) ms/iter", done_line)
    if wall is None or not Path(plain_path).exists():
        print(f"{n:>2} ranks: no figure (no done line or no plain-torch timing)")
        return 1
    ms = float(wall.group(1).replace(",", ""))
    split = done_line.split("ms/iter", 1)[1].split("|")[0].strip(" ,")
    plain = {key.split("/")[1]: s["median_ms"] for key, s in json.loads(Path(plain_path).read_text()).items() if key != "args"}
    floor, big = n * plain["64"], plain[str(n * 64)]
    print(f"{n:>2} ranks (threads, serial)     {ms:.2f} ms/iter ({split}); serial floor {n} x {plain['64']:.2f} = "
          f"{floor:.2f} ms ({ms / floor:.2f}x); one batch of {n} x 64: {big:.2f} ms ({ms / big:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit({"simulated": simulated, "compare": compare, "timing": timing, "overhead": overhead, "ranks": ranks}[
        sys.argv[1]](*sys.argv[2:]))
EOF

# ---- rows ------------------------------------------------------------------------------------------
# R_NAME: the table's check; R_KIND: doctor | cuda | train | simulated | timing; R_ARGS: the run's
# overrides; R_SKIP: why the row does not run here (empty: it runs); R_PAIR: the gloo row of an
# nccl row (its losses are compared).
R_NAME=() R_KIND=() R_ARGS=() R_SKIP=() R_PAIR=()
row() {  # row NAME KIND SKIP ARGS...
    R_NAME+=("$1") R_KIND+=("$2") R_SKIP+=("$3") R_PAIR+=("")
    shift 3
    R_ARGS+=("$*")
}
GPU_ONLY=""
[ "$CPU" = 1 ] && GPU_ONLY="skipped: no GPU (--cpu)"

row "dlcomm doctor" doctor ""
row "CUDA visible (nvidia-smi, torch.cuda)" cuda "$GPU_ONLY"
row "timing: compute_s vs the step alone" timing "" \
    launcher=local nodes=1 train.device=$DEVICE train.max_steps=$TIMING_STEPS $TIMING_THREADS
row "local nodes=1 backend=nccl (world size 1)" train "$GPU_ONLY" \
    launcher=local nodes=1 launcher.backend=nccl train.device=cuda train.max_steps=$STEPS
for model in small_cnn resnet18; do
    row "perf: step overhead $model" overhead "" "$model"
done
PERF_STEM=""
[ "$PERF_MODEL" = resnet18 ] && PERF_STEM=model.cifar_stem=true
for ranks in 4 16; do
    row "perf: $ranks ranks threads compute=serial" ranks "" launcher=threads launcher.compute=serial nodes=$ranks \
        model=$PERF_MODEL $PERF_STEM dataset=synthetic train.batch_size=64 train.device=$DEVICE \
        train.max_steps=$PERF_STEPS train.eval_size=256
done
# issue 60 item 5: serial / parallel / batched / one batch of N x B on the device (bench_compute_modes.py)
row "perf: compute modes (serial, parallel, batched)" modes ""
# issue 56 item 4: the profile measured here against a real 4-rank serial run's measured compute (gpu_profiles.sh)
row "perf: profile predicts compute (resnet18 b128)" prediction "$GPU_ONLY" resnet18_b128_fp32
FIRST_POOL=${#R_NAME[@]}  # rows before this run one at a time, those after JOBS at once

shape() {  # the job shape an algorithm is checked at
    case "$1" in
        allreduce_hier|crossover_hier|node_based) echo "nodes=2 workers_per_node=2" ;;
        sesgd|local_sesgd) echo "nodes=4 algo.groups=2" ;;
        *) echo "nodes=4" ;;
    esac
}
ALGOS=$("$PY" -c "from dlcomm.catalog import classes; print(' '.join(n for n, c in sorted(classes('algo').items()) if c.__module__.startswith('dlcomm.')))")
for algo in $ALGOS; do
    for semantics in gloo nccl; do
        row "threads $algo semantics=$semantics" train "" launcher=threads train.device=$DEVICE algo=$algo \
            $(shape "$algo") launcher.semantics=$semantics train.max_steps=$STEPS
        [ "$semantics" = nccl ] && R_PAIR[$((${#R_NAME[@]} - 1))]=$((${#R_NAME[@]} - 2))
    done
done
# the outer gradients in 4-bit floats (Streaming DiLoCo's), several outer steps within STEPS
for algo in diloco streaming_diloco; do
    row "threads $algo compress=lowbit" train "" launcher=threads train.device=$DEVICE algo=$algo \
        $(shape "$algo") compress=lowbit algo.period=5 launcher.semantics=nccl train.max_steps=$STEPS
done
for algo in allreduce crossover crossover_hier ps; do
    row "threads $algo network.mode=simulate" simulated "" launcher=threads train.device=$DEVICE algo=$algo \
        $(shape "$algo") network=eth_10g network.mode=simulate launcher.semantics=nccl train.max_steps=$STEPS
done
for algo in allreduce dpsgd crossover_hier; do
    row "threads $algo amp fp16" train "" launcher=threads train.device=$DEVICE algo=$algo $(shape "$algo") \
        train.amp=true train.amp_dtype=fp16 train.max_steps=$STEPS
done
# the parameter server refuses fp16 loss scaling (its server would apply scaled gradients): bf16
row "threads ps amp bf16 (ps refuses fp16)" train "" launcher=threads train.device=$DEVICE algo=ps $(shape ps) \
    train.amp=true train.amp_dtype=bf16 train.max_steps=$STEPS
ROWS=${#R_NAME[@]}

# ---- running one row ---------------------------------------------------------------------------------
# run_row I SECONDS: runs row I with at most SECONDS; writes $BASE/rows/I/{status,secs,note,run}
run_row() {
    local i=$1 limit=$2 dir="$BASE/rows/$1"
    mkdir -p "$dir"
    local start rc=0 note="" status=ok run="" done_line
    start=$(date +%s.%N)
    case "${R_KIND[$i]}" in
        doctor)
            "$DLCOMM" doctor >"$dir/log" 2>&1 || rc=$?
            note=$(grep -E '^torch ' "$dir/log" | sed -E 's/ +/ /g' | head -c 110)
            ;;
        cuda)
            { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader &&
              "$PY" -c "import torch; assert torch.cuda.is_available(); print(torch.cuda.get_device_name(0), 'cuda', torch.version.cuda)"; } \
                >"$dir/log" 2>&1 || rc=$?
            note=$(tail -n 1 "$dir/log" | head -c 110)
            ;;
        overhead)  # shellcheck disable=SC2086  # PERF_OVERHEAD holds options without spaces
            timeout --kill-after=15 "$limit" "$PY" scripts/bench_step_overhead.py --device "$DEVICE" \
                --models "${R_ARGS[$i]}" $PERF_OVERHEAD --json "$dir/perf.json" >"$dir/log" 2>&1
            if [ -f "$dir/perf.json" ]; then  # written once measured: a ratio above target is information
                "$PY" "$BASE/helpers.py" overhead "$dir/perf.json" >"$dir/perf" 2>&1 || rc=$?
                note="see the performance table"
            else
                rc=1 note=$(tail -n 1 "$dir/log" | head -c 200)
            fi
            ;;
        modes)  # shellcheck disable=SC2086  # PERF_MODES holds options without spaces
            timeout --kill-after=15 "$limit" "$PY" scripts/bench_compute_modes.py --device "$DEVICE" $PERF_MODES \
                >"$dir/log" 2>&1 || rc=$?
            { echo "compute modes, launcher=threads (scripts/bench_compute_modes.py; ms per iteration, median):"
              grep -E '^(device|cpu|cuda) ' "$dir/log"; } >"$dir/perf"
            note="see the performance table"
            [ "$rc" -eq 0 ] || note=$(tail -n 1 "$dir/log" | head -c 200)
            ;;
        prediction)  # ok within 10% (scripts/gpu_profiles.sh); its profile lands in the row's folder
            DEVICE=gpu-check OUT="$dir" ONLY="^${R_ARGS[$i]}\$" DLCOMM="$DLCOMM" PY="$PY" \
                timeout --kill-after=15 "$limit" scripts/gpu_profiles.sh >"$dir/log" 2>&1 || rc=$?
            note=$(grep -E "^${R_ARGS[$i]}\|" "$dir/log" | tail -n 1 | cut -d'|' -f2,4 | cut -d';' -f1 | head -c 200)
            [ -n "$note" ] || note=$(tail -n 1 "$dir/log" | head -c 200)
            echo "profile prediction, ${R_ARGS[$i]}: $note" >"$dir/perf"
            ;;
        *)
            local attempt=0 retry=1
            while [ "$retry" = 1 ]; do  # only the timing row retries, and only its comparison's failures
                attempt=$((attempt + 1)) retry=0 rc=0
                # shellcheck disable=SC2086  # R_ARGS holds overrides without spaces
                DLCOMM_HOME="$dir" timeout --kill-after=15 "$limit" "$DLCOMM" train ${R_ARGS[$i]} "${EXTRA[@]}" \
                    >"$dir/log" 2>&1 || rc=$?
                done_line=$(tr '\r' '\n' <"$dir/log" | grep -E '^done:' | tail -n 1)
                run=$(sed -nE 's/.*mlflow run ([0-9a-f]+).*/\1/p' <<<"$done_line")
                [ -n "$run" ] && run="$dir/results/runs/$run"
                if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
                    note="timed out after $limit s"
                elif [ "$rc" -ne 0 ] || [ -z "$done_line" ]; then
                    note=$(tr '\r' '\n' <"$dir/log" | grep -v '^train:' | grep -v '^[[:space:]]*$' | tail -n 1 | head -c 200)
                    [ "$rc" -eq 0 ] && rc=1
                else
                    note=$(sed -nE 's/^done: test accuracy ([0-9.]+%|n\/a).*\| wall ([0-9.,]+ ms\/iter).*/acc \1, \2/p' <<<"$done_line")
                    if [ "${R_KIND[$i]}" = simulated ]; then
                        "$PY" "$BASE/helpers.py" simulated "$run" >"$dir/check" 2>&1 || rc=$?
                        note=$(tail -n 1 "$dir/check")
                    elif [ "${R_KIND[$i]}" = timing ]; then
                        # shellcheck disable=SC2086
                        timeout 300 "$PY" "$BASE/helpers.py" timing "$run" "$DEVICE" "$TIMING_WARMUP" \
                            ${R_ARGS[$i]} "${EXTRA[@]}" >"$dir/check" 2>&1 || rc=$?
                        note="$(tail -n 1 "$dir/check" | head -c 200) [attempt $attempt of $TIMING_ATTEMPTS]"
                        [ "$rc" -eq 1 ] && [ "$attempt" -lt "$TIMING_ATTEMPTS" ] && retry=1
                    elif [ "${R_KIND[$i]}" = ranks ]; then
                        local ranks model
                        ranks=$(sed -nE 's/.*nodes=([0-9]+).*/\1/p' <<<"${R_ARGS[$i]}")
                        model=$(sed -nE 's/.*model=([a-z0-9_]+).*/\1/p' <<<"${R_ARGS[$i]}")
                        # shellcheck disable=SC2086
                        timeout 300 "$PY" scripts/bench_step_overhead.py --device "$DEVICE" --models "$model" \
                            --plain-batches 64 $((ranks * 64)) $PERF_PLAIN --json "$dir/plain.json" >"$dir/check" 2>&1 || true
                        "$PY" "$BASE/helpers.py" ranks "$ranks" "$done_line" "$dir/plain.json" >"$dir/perf" 2>&1 || rc=$?
                        note="$note; see the performance table"
                    fi
                fi
            done
            ;;
    esac
    [ "$rc" -eq 0 ] || status=FAIL
    awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }' >"$dir/secs"
    echo "$status" >"$dir/status"
    echo "$note" >"$dir/note"
    echo "$run" >"$dir/run"
    printf '[%2d/%d] %-44s %-4s %6s s\n' "$((i + 1))" "$ROWS" "${R_NAME[$i]}" "$status" "$(cat "$dir/secs")"
}

# start_row I: runs row I unless it is skipped or the deadline is too close
start_row() {
    local i=$1 left dir="$BASE/rows/$1"
    local skip=${R_SKIP[$i]}
    if [ -z "$skip" ] && [ -n "${ONLY:-}" ] && ! grep -qE -- "$ONLY" <<<"${R_NAME[$i]}"; then
        skip="skipped: not matched by ONLY=$ONLY"
    fi
    if [ -n "$skip" ]; then
        mkdir -p "$dir"; echo skip >"$dir/status"; echo - >"$dir/secs"; echo "$skip" >"$dir/note"; : >"$dir/run"
        return 1
    fi
    left=$((DEADLINE - ($(date +%s) - STARTED)))
    if [ "$left" -lt 30 ]; then
        mkdir -p "$dir"; echo FAIL >"$dir/status"; echo - >"$dir/secs"; : >"$dir/run"
        echo "not run: the script's deadline ($DEADLINE s) was near" >"$dir/note"
        return 1
    fi
    [ "$left" -gt "$ROW_TIMEOUT" ] && left=$ROW_TIMEOUT
    echo "$left"
}

echo "gpu_check: $ROWS rows, device $DEVICE, $STEPS steps per run, $JOBS at once, $ROW_TIMEOUT s per row, deadline $DEADLINE s"
for ((i = 0; i < FIRST_POOL; i++)); do
    limit=$(start_row "$i") && run_row "$i" "$limit"
done
for ((i = FIRST_POOL; i < ROWS; i++)); do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    limit=$(start_row "$i") && run_row "$i" "$limit" &
done
wait

# ---- the table -----------------------------------------------------------------------------------------
failed=0
for ((i = 0; i < ROWS; i++)); do
    dir="$BASE/rows/$i"
    [ -f "$dir/status" ] || { mkdir -p "$dir"; echo FAIL >"$dir/status"; echo - >"$dir/secs"; echo "no result" >"$dir/note"; }
    pair=${R_PAIR[$i]}
    if [ -n "$pair" ] && [ "$(cat "$dir/status")" = ok ] && [ "$(cat "$BASE/rows/$pair/status")" = ok ]; then
        if [ "${R_ARGS[$i]}" != "${R_ARGS[$i]/algo=gossip_pull/}" ]; then
            compared="losses not compared (gossip_pull's pulls race by design)"
        else
            compared=$("$PY" "$BASE/helpers.py" compare "$(cat "$BASE/rows/$pair/run")" "$(cat "$dir/run")" 2>&1 | tail -n 1)
        fi
        echo "$(cat "$dir/note"); $compared" >"$dir/note"
    fi
done
echo
printf '%-44s %-6s %8s  %s\n' check status seconds note
printf '%-44s %-6s %8s  %s\n' "--------------------------------------------" "------" "--------" "----"
for ((i = 0; i < ROWS; i++)); do
    dir="$BASE/rows/$i"
    status=$(cat "$dir/status")
    printf '%-44s %-6s %8s  %s\n' "${R_NAME[$i]}" "$status" "$(cat "$dir/secs")" "$(cat "$dir/note")"
    [ "$status" = FAIL ] && failed=$((failed + 1))
done
perf=$(for ((i = 0; i < ROWS; i++)); do [ -s "$BASE/rows/$i/perf" ] && cat "$BASE/rows/$i/perf"; done)
if [ -n "$perf" ]; then
    echo
    echo "performance, device $DEVICE (ms; ratios dlcomm / plain torch, target <= 1.05; median and fastest step)"
    echo "$perf"
fi
elapsed=$(($(date +%s) - STARTED))
echo
if [ "$failed" -ne 0 ]; then
    echo "gpu_check: $failed row(s) FAILED ($elapsed s; device $DEVICE; KEEP_HOME=1 keeps every row's log)"
    exit 1
fi
echo "gpu_check: every row ok or skipped ($elapsed s; device $DEVICE)"
exit 0
