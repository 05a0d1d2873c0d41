#!/usr/bin/env bash
# FCP against what MindSpeed-MM's Qwen3-VL users run today (upstream's sampler with one sample per micro-batch at
# the default and at the tuned CP layout, upstream's dynamic batching by token budget), a tuned static layout and
# Megatron-LM's hybrid CP and Huawei's HDP (as modelled in solver/hdp_baseline.py), on the measured H200 table and the A3 preset: 5 workloads, 3 seeds, 2 batches each of
# 8 samples per rank. Writes benchmarks/results/user_baselines/<preset>_<ranks>.txt. Qwen3-VL-30B-A3B (its state needs 16
# A3 ranks): PRESETS=h200-qwen3vl-30b-a3b RANKS="8 64 256" and PRESETS=a3-qwen3vl-30b-a3b RANKS="16 64 256".
set -euo pipefail
cd "$(dirname "$0")/.."
FCP=${FCP:-.venv/bin/fcp}
OUT=benchmarks/results/user_baselines
mkdir -p "$OUT"
STRATEGIES=fcp,tuned_static_fsdp,megatron_hybrid_cp,hdp,mindspeed_mm_sampler,mindspeed_mm_sampler_tuned,mindspeed_mm_dynamic_batching
for preset in ${PRESETS:-h200-qwen3vl-8b a3-qwen3vl-8b}; do
  for ranks in ${RANKS:-8 64 256}; do
    "$FCP" simulate --preset "$preset" --ranks "$ranks" --global-batch-size $((8 * ranks)) --batches 2 --seeds 0,1,2 \
      --datasets openvid,internvid,msrvtt,imagevideo,bimodal --strategies "$STRATEGIES" --no-progress \
      > "$OUT/${preset}_${ranks}.txt"
    echo "$preset $ranks done"
  done
done
