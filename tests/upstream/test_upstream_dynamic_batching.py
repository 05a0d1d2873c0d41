"""The simulator's `mindspeed_mm_dynamic_batching` baseline packs micro-batches as upstream's dynamic batching
does: its `TextBatchingStrategy` (MindSpeed-MM `mindspeed_mm/data/dataloader/batching_strategy.py`, a module
without imports, loaded from the checkout) is fed the same replica's samples and drained."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from bed import find_sources
from conftest import unavailable
from mindspeed_mm.core.fcp.simulate.mixes import draw_lengths
from mindspeed_mm.core.fcp.solver.mindspeed_mm_runs import token_budget_micro_batches

STRATEGY_FILE = "mindspeed_mm/data/dataloader/batching_strategy.py"


def _upstream_strategy_module():
    path = find_sources().mindspeed_mm / STRATEGY_FILE
    if not path.is_file():
        unavailable(f"no MindSpeed-MM checkout with {STRATEGY_FILE} ({path} is missing)")
    spec = importlib.util.spec_from_file_location("upstream_batching_strategy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _upstream_micro_batches(module, samples, lengths, budget):
    """Upstream's loader once its buffer holds every sample of the replica: micro-batches until it is empty."""
    strategy = module.TextBatchingStrategy(max_seq_len=budget, buffer_size=len(samples))
    for i in samples:
        strategy.put_item({"index": i, "attention_mask": np.ones(int(lengths[i]), dtype=np.int64)})
    assert strategy.is_full_filled() or sum(int(lengths[i]) for i in samples) < budget
    batches = []
    while not strategy.empty():
        batches.append(tuple(sorted(item["index"] for item in strategy.get_micro_batch())))
    return batches


@pytest.mark.parametrize("workload", ["openvid", "internvid", "imagevideo", "bimodal"])
@pytest.mark.parametrize("budget", [8192, 65536, 200000])
def test_token_budget_micro_batches_are_upstreams(workload, budget):
    module = _upstream_strategy_module()
    lengths, _ = draw_lengths(workload, 256, 3)
    for replica in range(4):
        samples = list(range(replica, lengths.size, 4))
        ours = token_budget_micro_batches(samples, lengths, budget)
        assert ours == _upstream_micro_batches(module, samples, lengths, budget)
        assert sorted(i for batch in ours for i in batch) == samples
