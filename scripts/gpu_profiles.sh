#!/usr/bin/env bash
# Compute profiles of the papers' workloads, measured on this machine's GPU, and the check that a
# profile predicts what the device then does (issue 56, items 3 and 4). For the next session lent a GPU:
#
#   DEVICE=h200 scripts/gpu_profiles.sh            # on the GPU node; writes profiles/<DEVICE>/*.json under $OUT
#   DRY=1 DEVICE=cpu-dry scripts/gpu_profiles.sh   # the same commands on the CPU with batch 2, to check them
#
# For each workload (the paper presets' model, input shape and per-worker batch, on synthetic data of
# that shape: a profile needs only the shape), `dlcomm profile ... --out` writes
# $OUT/profiles/<DEVICE>/<model>_b<batch>_<fp32|amp>.json (commit them as src/dlcomm/profiles/<DEVICE>/;
# add a "note" field naming the driver). Then the prediction check: `dlcomm train` of the same
# workload with launcher=threads launcher.compute=serial, 4 ranks, network=off, PREDICT_STEPS steps;
# the median of its ranks' measured compute_s (timings.csv, after train.timing_warmup) against the
# profile's step; ok within 10%. Prints one table; exit 1 if a row failed.
# Environment: DEVICE (the library's device name; required), OUT (where results go; default ./gpu_profiles_out),
# PREDICT_STEPS (30), ONLY (a regex over workload names), DRY=1 (CPU, batch 2, 6 steps).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${DEVICE:?set DEVICE, e.g. DEVICE=h200}"
OUT=${OUT:-$PWD/gpu_profiles_out}
PREDICT_STEPS=${PREDICT_STEPS:-30}
ONLY=${ONLY:-.}
DLCOMM=${DLCOMM:-.venv/bin/dlcomm}
PY=${PY:-.venv/bin/python}
device=(train.device=cuda)
if [ "${DRY:-0}" = 1 ]; then device=(train.device=cpu); PREDICT_STEPS=6; fi
export DLCOMM_HOME=$(mktemp -d) DLCOMM_PROFILES=$(mktemp -d)
mkdir -p "$OUT/profiles/$DEVICE"
# name | overrides (the preset, then synthetic data of its shape)
WORKLOADS=(
  "small_cnn_b64_fp32|dataset=synthetic dataset.shape=[1,28,28] train.batch_size=64"
  "nin_b16_fp32|experiment=wan_gossip_paper dataset=synthetic dataset.shape=[1,28,28]"
  "resnet18_b16_fp32|experiment=sesgd_paper dataset=synthetic dataset.shape=[3,32,32]"
  "resnet18_b128_fp32|experiment=node_based_paper dataset=synthetic dataset.shape=[3,32,32]"
  "resnet50_b64_fp32|experiment=layerdrop_paper dataset=synthetic dataset.shape=[3,224,224] dataset.num_classes=1000"
  "resnet50_b256_amp|experiment=crossover_paper dataset=synthetic dataset.shape=[3,224,224] dataset.num_classes=1000"
  "vgg16_b256_fp32|model=vgg16 dataset=synthetic dataset.shape=[3,32,32] dataset.num_classes=100 train.batch_size=256"
  "vit_s_b64_fp32|model=vit_s dataset=synthetic dataset.shape=[3,224,224] dataset.num_classes=1000 train.batch_size=64"
  "lstm_b64_fp32|model=lstm dataset=synthetic dataset.shape=[1,28,28] train.batch_size=64"
)
rows=()
failed=0
for entry in "${WORKLOADS[@]}"; do
  name=${entry%%|*}
  read -r -a overrides <<< "${entry#*|}"
  [[ $name =~ $ONLY ]] || continue
  [ "${DRY:-0}" = 1 ] && overrides+=(train.batch_size=2)
  file="$OUT/profiles/$DEVICE/$name.json"
  log="$OUT/$name.log"
  start=$(date +%s)
  if ! $DLCOMM profile "${overrides[@]}" "${device[@]}" --fresh --out "$file" > "$log" 2>&1; then
    rows+=("$name|profile FAILED|$(( $(date +%s) - start ))|$(tail -1 "$log")"); failed=1; continue
  fi
  profile_line=$(grep -m1 '^compute profile:' "$log")
  if ! $DLCOMM train "${overrides[@]}" "${device[@]}" launcher=threads launcher.compute=serial nodes=4 workers_per_node=1 \
      network=off train.max_steps=$PREDICT_STEPS train.timing_warmup=5 train.eval_batch_size=64 train.eval_size=256 >> "$log" 2>&1; then
    rows+=("$name|train FAILED|$(( $(date +%s) - start ))|$(tail -1 "$log")"); failed=1; continue
  fi
  run_id=$(grep -o 'mlflow run [0-9a-f]\{32\}' "$log" | tail -1 | cut -d' ' -f3)
  verdict=$($PY - "$file" "$DLCOMM_HOME/results/runs/$run_id/timings.csv" <<'PYEOF'
import json, sys
import pandas as pd
profile = json.load(open(sys.argv[1]))
timings = pd.read_csv(sys.argv[2])
measured = timings[timings["step"] >= 5]["compute_s"].median()
ratio = measured / profile["step_s"]
print(f"{'ok' if abs(ratio - 1) <= 0.10 else 'FAILED'}|measured compute {measured * 1e3:.2f} ms / profile {profile['step_s'] * 1e3:.2f} ms = {ratio:.3f}")
PYEOF
)
  [[ $verdict == ok* ]] || failed=1
  rows+=("$name|${verdict%%|*}|$(( $(date +%s) - start ))|${verdict#*|}; ${profile_line#compute profile: }")
done
printf '\n%s\n' "profiles of $DEVICE in $OUT/profiles/$DEVICE ($(date -u '+%Y-%m-%d %H:%M UTC'))"
printf '%s\n' "workload | status | s | prediction (4 ranks, launcher.compute=serial, network=off) ; profile" "---|---|---|---"
printf '%s\n' "${rows[@]}"
exit $failed
