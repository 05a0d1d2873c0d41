"""`torch_npu.utils.flops_count`: the FLOPs counter is not implemented on the CPU bed."""
from torch_npu._ops import loud_stub

FlopsCounter = loud_stub("torch_npu.utils.flops_count.FlopsCounter")
