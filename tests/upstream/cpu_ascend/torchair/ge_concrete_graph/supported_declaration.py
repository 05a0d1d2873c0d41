"""`torchair.ge_concrete_graph.supported_declaration`: loud stubs."""
from torch_npu._ops import loud_stub

_TypedTensor = loud_stub("torchair.ge_concrete_graph.supported_declaration._TypedTensor")
BF16 = F32 = F16 = I32 = I64 = None  # dtype markers of the declarations; unused on the host
