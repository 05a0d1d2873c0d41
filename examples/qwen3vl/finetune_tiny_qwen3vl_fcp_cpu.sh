#!/bin/bash
# Tiny Qwen3-VL-shaped model (video encoder + decoder, 3D mRoPE) trained with FCP on 4 CPU processes
# through `fcp train` (no NPU needed).
# Usage: bash examples/qwen3vl/finetune_tiny_qwen3vl_fcp_cpu.sh   (PYTHON=.venv/bin/python to pick an interpreter)
export OMP_NUM_THREADS=1               # several ranks share the CPU cores

PYTHON=${PYTHON:-python3}
NPROC_PER_NODE=${NPROC_PER_NODE:-4}
BASEPATH=$(cd "$(dirname "$0")/../.."; pwd)
MM_CONFIG="$BASEPATH/examples/qwen3vl/tiny_qwen3vl_fcp_cpu.yaml"

# One node: --standalone picks a free rendezvous port on localhost.
DISTRIBUTED_ARGS="
    --standalone \
    --nproc_per_node $NPROC_PER_NODE
"

logdir=logs/tiny_qwen3vl_fcp_cpu
logfile=tiny_qwen3vl_fcp_cpu_$(date +%Y%m%d)_$(date +%H%M%S)
mkdir -p $logdir
$PYTHON -m torch.distributed.run $DISTRIBUTED_ARGS \
    -m mindspeed_mm.core.fcp.cli train $MM_CONFIG --cpu \
    2>&1 | tee ${logdir}/${logfile}.log
TRAIN_EXITCODE=${PIPESTATUS[0]}
if [ $TRAIN_EXITCODE -ne 0 ]; then
    echo "training failed with exit code $TRAIN_EXITCODE, see ${logdir}/${logfile}.log"
    exit $TRAIN_EXITCODE
fi

# Mean step time without the first iteration (it includes planning start-up and group creation)
STEP_TIME=`grep "elapsed time per iteration" ${logdir}/${logfile}.log | awk -F 'elapsed time per iteration [(]ms[)]:' '{print$2}' | awk -F '|' '{print$1}' | tail -n +2 | awk '{sum+=$1} END {if (NR != 0) printf("%.1f",sum/NR)}'`
GBS=`grep "global batch size" ${logdir}/${logfile}.log | awk -F 'global batch size:' '{print$2}' | awk -F '|' '{print$1}' | head -n 1 | awk '{print $1}'`
SAMPLES_PER_SECOND=`awk 'BEGIN{printf "%.3f\n", '${GBS}'*1000/'${STEP_TIME}'}'`
echo "Elapsed Time Per iteration (ms): $STEP_TIME" | tee -a ${logdir}/${logfile}.log
echo "Average Samples per Second: $SAMPLES_PER_SECOND" | tee -a ${logdir}/${logfile}.log
