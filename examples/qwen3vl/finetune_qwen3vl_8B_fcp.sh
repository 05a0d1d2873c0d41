#!/bin/bash
# Qwen3-VL-8B full SFT with FCP on one Atlas A3 node of 8 NPUs, the layout of MindSpeed-MM's
# finetune_qwen3vl_8B.sh. The entry script must register FCP once, before `import mindspeed.megatron_adaptor`:
#     import mindspeed_mm_fcp.register  # noqa: F401
# (see docs/zh/features/parallel/fcp.md). Switching back to static CP only needs
# context_parallel_algo: ulysses_cp_algo and context_parallel_size in the YAML.

# Change to the ascend-toolkit path of this machine
source /usr/local/Ascend/cann/set_env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=2   # only to pass Megatron's check; no effect on NPU (FSDP2 needs > 1)
export ASCEND_SLOG_PRINT_TO_STDOUT=0
export ASCEND_GLOBAL_LOG_LEVEL=3
export TASK_QUEUE_ENABLE=2
export CPU_AFFINITY_CONF=1
export HCCL_CONNECT_TIMEOUT=1200
export HCCL_EXEC_TIMEOUT=1200
export ASCEND_LAUNCH_BLOCKING=0
export ACLNN_CACHE_LIMIT=100000
export TOKENIZERS_PARALLELISM=false
export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
export MULTI_STREAM_MEMORY_REUSE=1
# export HCCL_SOCKET_IFNAME=
# export GLOO_SOCKET_IFNAME=

NPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES=1
NODE_RANK=0
WORLD_SIZE=$(($NPUS_PER_NODE*$NNODES))

MM_CONFIG="${1:-./examples/qwen3vl/qwen3vl_full_sft_8B_fcp.yaml}"  # or the recipe given as the first argument

DISTRIBUTED_ARGS="
    --nproc_per_node $NPUS_PER_NODE \
    --nnodes $NNODES \
    --node_rank $NODE_RANK \
    --master_addr $MASTER_ADDR \
    --master_port $MASTER_PORT
"

logdir=logs/qwen3vl_8B_fcp
logfile=qwen3vl_8B_fcp_$(date +%Y%m%d)_$(date +%H%M%S)
mkdir -p $logdir
torchrun $DISTRIBUTED_ARGS pretrain_transformers.py \
    $MM_CONFIG \
    --distributed-backend nccl \
    2>&1 | tee ${logdir}/${logfile}.log
chmod 440 ${logdir}/${logfile}.log

# Mean step time over iterations 11-200 (the first ones include compilation and group creation)
STEP_TIME=`grep "elapsed time per iteration" ${logdir}/${logfile}.log | awk -F 'elapsed time per iteration [(]ms[)]:' '{print$2}' | awk -F '|' '{print$1}' | head -n 200 | tail -n +11 | awk '{sum+=$1} END {if (NR != 0) printf("%.1f",sum/NR)}'`
GBS=`grep "global batch size" ${logdir}/${logfile}.log | awk -F 'global batch size:' '{print$2}' | awk -F '|' '{print$1}' | head -n 1 | awk '{print $1}'`
if [ -n "$STEP_TIME" ] && [ -n "$GBS" ]; then
    SAMPLES_PER_SECOND=`awk 'BEGIN{printf "%.3f\n", '${GBS}'*1000/'${STEP_TIME}'}'`
    echo "Elapsed Time Per iteration (ms): $STEP_TIME" | tee -a ${logdir}/${logfile}.log
    echo "Average Samples per Second: $SAMPLES_PER_SECOND" | tee -a ${logdir}/${logfile}.log
fi
