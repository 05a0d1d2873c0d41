"""`fcp profile`: measure the cost model's profile table on this device and validate it.

Several processes measure at once (as the ranks of a training round work at once): attention
grids (causal, full, the off-diagonal block of a causal ring step), the linear work per token,
point-to-point and all-to-all exchanges alone and inside a busy step, memory per token and of the
training state. Validation runs real group executions (ring / Ulysses over gloo groups) of mixed
packed batches between the measurement sweeps and compares their times with the cost model's.
"""
from mindspeed_mm.core.fcp.profiler.config import ProfileConfig, model_shape
from mindspeed_mm.core.fcp.profiler.profiling import ProfileResult, ValidationPlan, profile_device, write_profile
from mindspeed_mm.core.fcp.profiler.validation import (
    ValidationReport,
    ValidationRound,
    ValidationSettings,
    default_rounds,
    validate,
)

__all__ = ["ProfileConfig", "ProfileResult", "ValidationPlan", "ValidationReport", "ValidationRound",
           "ValidationSettings", "default_rounds", "model_shape", "profile_device", "validate", "write_profile"]
