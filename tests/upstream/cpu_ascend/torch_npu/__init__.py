"""CPU implementation of the `torch_npu` surface that MindSpeed / MindSpeed-MM's Qwen3-VL path uses.

Test-bed code: it lets the unmodified upstream entry scripts run on a host without Ascend hardware. Operators
called on that path are implemented with their documented semantics (`_attention.py`, `_ops.py`, `_moe.py`); `torch.npu`
is the host (`npu/`). Importing this package only binds `torch.npu`, as the real one does; the global
redirections of `torch.cuda` and of device arguments happen in `torch_npu.contrib.transfer_to_npu`.
Operators that upstream imports but this bed does not implement are loud stubs (NotImplementedError naming
them); names upstream probes with `hasattr` for optional features are absent.
"""
from __future__ import annotations

import torch

from torch_npu import _ops
from torch_npu._attention import npu_fusion_attention, npu_fusion_attention_grad  # noqa: F401
from torch_npu._moe import (  # noqa: F401
    npu_grouped_matmul, npu_moe_token_permute, npu_moe_token_unpermute, npu_swiglu,
)
from torch_npu._ops import npu_rms_norm, npu_rotary_mul  # noqa: F401
from torch_npu import npu  # noqa: E402
from torch_npu import _C, contrib, profiler, utils  # noqa: F401,E402  (the real package exposes these on import)

__version__ = "2.7.1.cpu_ascend"
__file__ = __file__

for _name in _ops.STUB_OPS:
    globals()[_name] = _ops.loud_stub(f"torch_npu.{_name}")

# The quantised dtypes the NPU build lists as unsupported (kept identical so dtype tables match an NPU run).
unsupported_dtype = [torch.quint8, torch.quint4x2, torch.quint2x4, torch.qint32, torch.qint8]

torch.npu = npu
