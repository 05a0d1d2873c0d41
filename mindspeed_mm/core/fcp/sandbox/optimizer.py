"""The torch optimizer of a run."""
from __future__ import annotations

import torch

from mindspeed_mm.core.fcp.sandbox.run_config import OptimizerConfig


def build_optimizer(params: list[torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.Optimizer:
    """The configured torch optimizer."""
    if config.optimizer == "adam":
        return torch.optim.Adam(
            params,
            lr=config.lr,
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )
    return torch.optim.SGD(params, lr=config.lr, momentum=config.sgd_momentum, weight_decay=config.weight_decay)
