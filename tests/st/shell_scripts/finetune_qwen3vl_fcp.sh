#!/bin/bash
# ST case: MindSpeed-MM's Qwen3-VL with context_parallel_algo: fcp_cp_algo through pretrain_transformers.py, the
# tiny model with long videos on 4 CPU processes (gloo) of the CPU test bed. Its log goes to stdout; MindSpeed-MM's
# tests/st/test_tools/test_ci_st.py compares it with baseline_results/finetune_qwen3vl_fcp.json.
# The same case on 8 NPUs: tests/st/npu/finetune_qwen3vl_fcp.sh.
set -eo pipefail
BASEPATH=$(cd "$(dirname "$0")/../../.."; pwd)
bash "$BASEPATH/examples/qwen3vl/finetune_qwen3vl_tiny_cpu_fcp.sh" \
    "$BASEPATH/tests/st/run_configs/finetune_qwen3vl_fcp/qwen3vl_tiny_cpu_fcp.yaml"
