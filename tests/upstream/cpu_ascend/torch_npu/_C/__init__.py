"""`torch_npu._C`: the native-extension namespace; only the distributed options classes exist on the CPU bed."""
from torch_npu._C import _distributed_c10d  # noqa: F401
