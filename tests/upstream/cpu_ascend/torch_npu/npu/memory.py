"""`torch.npu.memory`: snapshot and allocator hooks are not implemented on the host (loud stubs)."""
from torch_npu._ops import loud_stub

_record_memory_history = loud_stub("torch.npu.memory._record_memory_history")
_dump_snapshot = loud_stub("torch.npu.memory._dump_snapshot")
change_current_allocator = loud_stub("torch.npu.memory.change_current_allocator")
NPUPluggableAllocator = loud_stub("torch.npu.memory.NPUPluggableAllocator")


def __getattr__(name):
    from torch_npu import npu

    if hasattr(npu, name):
        return getattr(npu, name)
    raise AttributeError(f"module 'torch.npu.memory' has no attribute {name!r}")
