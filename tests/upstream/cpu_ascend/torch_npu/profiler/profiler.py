"""`torch_npu.profiler.profiler`: offline analysis of Ascend traces is not implemented on the host."""
from torch_npu._ops import loud_stub

analyse = loud_stub("torch_npu.profiler.profiler.analyse")
