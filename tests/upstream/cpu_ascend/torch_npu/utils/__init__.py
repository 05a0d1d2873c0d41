"""`torch_npu.utils` on the CPU bed."""
from torch_npu._ops import loud_stub

register_asd_hook = loud_stub("torch_npu.utils.register_asd_hook")
