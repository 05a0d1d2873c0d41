#!/bin/bash
# FCP on a CPU, through MindSpeed-MM's own pretrain_transformers.py: the tiny Qwen3-VL with long videos
# (qwen3vl_tiny_cpu_fcp.yaml) on 4 gloo processes. The upstream stack is the CPU test bed's
# (tests/upstream/README.md: `make upstream-venv`, the MindSpeed-MM, MindSpeed and Megatron-LM sources); the
# MindSpeed-MM checkout with FCP overlaid and registered, the model and the data are built in $FCP_TINY_WORKDIR.
# Usage: bash examples/qwen3vl/finetune_qwen3vl_tiny_cpu_fcp.sh [RECIPE.yaml]
set -eo pipefail

BASEPATH=$(cd "$(dirname "$0")/../.."; pwd)
CONFIG=$(readlink -f "${1:-$BASEPATH/examples/qwen3vl/qwen3vl_tiny_cpu_fcp.yaml}")
PYTHON=${FCP_UPSTREAM_PYTHON:-$BASEPATH/.venv-upstream/bin/python}
FCP_TINY_WORKDIR=${FCP_TINY_WORKDIR:-$BASEPATH/build/tiny_cpu_fcp}
NPROC_PER_NODE=4

eval "$("$PYTHON" "$BASEPATH/tests/upstream/launch_bed.py" "$FCP_TINY_WORKDIR")"
cd "$CHECKOUT"
rm -rf tiny/save

# One node: --standalone picks a free rendezvous port on localhost. The CPU Ascend surface maps nccl to gloo.
"$UPSTREAM_PYTHON" -m torch.distributed.run --standalone --nproc_per_node $NPROC_PER_NODE \
    pretrain_transformers.py "$CONFIG" \
    --distributed-backend nccl 2>&1
