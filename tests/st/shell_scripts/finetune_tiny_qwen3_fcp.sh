#!/bin/bash
# ST case: FCP training of the tiny Qwen3 configuration on 4 CPU processes (gloo) through `fcp train`.
# The Megatron-style log goes to stdout; the ST runner turns it into JSON and compares it with
# tests/st/baseline_results/finetune_tiny_qwen3_fcp.json.
export OMP_NUM_THREADS=1

PYTHON=${PYTHON:-python3}
NPROC_PER_NODE=4
BASEPATH=$(cd "$(dirname "$0")/../../.."; pwd)
MM_CONFIG="$BASEPATH/tests/st/run_configs/finetune_tiny_qwen3_fcp/tiny_qwen3_fcp.yaml"

# One node: --standalone picks a free rendezvous port on localhost.
DISTRIBUTED_ARGS="
    --standalone \
    --nproc_per_node $NPROC_PER_NODE
"

$PYTHON -m torch.distributed.run $DISTRIBUTED_ARGS \
    -m mindspeed_mm.core.fcp.cli train $MM_CONFIG --cpu 2>&1
