#!/bin/bash
# ST case finetune_qwen3vl_fcp on one Atlas A3 node of 8 NPUs: Qwen3-VL-8B with FCP (the example recipe,
# 20 steps), in the form of MindSpeed-MM's tests/st/shell_scripts. Run from a MindSpeed-MM checkout with FCP
# overlaid and registered (docs/zh/features/parallel/fcp.md); compare with upstream's tools:
#   pytest tests/st/test_tools/test_ci_st.py --baseline-json <baseline> --generate-log <log> --generate-json <json>
# Its baseline (loss, step time, memory) is recorded on a device: see README.md beside this script.
source /usr/local/Ascend/cann/set_env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=2
export ASCEND_SLOG_PRINT_TO_STDOUT=0
export ASCEND_GLOBAL_LOG_LEVEL=3
export TASK_QUEUE_ENABLE=2
export CPU_AFFINITY_CONF=1
export HCCL_CONNECT_TIMEOUT=1200
export ASCEND_LAUNCH_BLOCKING=0
export ACLNN_CACHE_LIMIT=100000
export TOKENIZERS_PARALLELISM=false
export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
export MULTI_STREAM_MEMORY_REUSE=1

NPUS_PER_NODE=8
FCP_ROOT=$(cd "$(dirname "$0")/../../.."; pwd)
CONFIG="$FCP_ROOT/tests/st/run_configs/finetune_qwen3vl_fcp/qwen3vl_full_sft_8B_fcp.yaml"
RUN_CONFIG=$(mktemp --suffix=.yaml)
# The example recipe, 20 steps, no checkpoint at the end.
sed -e 's/^\(  train_iters:\) .*/\1 20/' -e 's/^\(  save_interval:\) .*/\1 10000/' "$CONFIG" > "$RUN_CONFIG"

torchrun --standalone --nproc_per_node $NPUS_PER_NODE pretrain_transformers.py "$RUN_CONFIG" \
    --distributed-backend nccl 2>&1
