#!/bin/bash
# ST case finetune_qwen3vl_fcp on one Atlas A3 node of 8 NPUs: Qwen3-VL-8B with FCP, the example recipe for 20
# steps, launched by the example script (examples/qwen3vl/finetune_qwen3vl_8B_fcp.sh, whose log goes to stdout).
# Run from a MindSpeed-MM checkout with FCP overlaid and registered (docs/zh/features/parallel/fcp.md); compare
# with upstream's tools:
#   pytest tests/st/test_tools/test_ci_st.py --baseline-json <baseline> --generate-log <log> --generate-json <json>
# Its baseline (loss, step time, memory) is recorded on a device: see README.md beside this script.
set -eo pipefail
FCP_ROOT=$(cd "$(dirname "$0")/../../.."; pwd)
CONFIG="$FCP_ROOT/tests/st/run_configs/finetune_qwen3vl_fcp/qwen3vl_full_sft_8B_fcp.yaml"
RUN_CONFIG=$(mktemp --suffix=.yaml)
# The example recipe, 20 steps, no checkpoint at the end.
sed -e 's/^\(  train_iters:\) .*/\1 20/' -e 's/^\(  save_interval:\) .*/\1 10000/' "$CONFIG" > "$RUN_CONFIG"
bash "$FCP_ROOT/examples/qwen3vl/finetune_qwen3vl_8B_fcp.sh" "$RUN_CONFIG"
