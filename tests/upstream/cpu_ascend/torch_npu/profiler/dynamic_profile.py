"""`torch_npu.profiler.dynamic_profile`: not implemented on the host (loud stubs)."""
from torch_npu._ops import loud_stub

init = loud_stub("torch_npu.profiler.dynamic_profile.init")
step = loud_stub("torch_npu.profiler.dynamic_profile.step")
