"""`torchair.ge`: loud stubs."""
from torch_npu._ops import loud_stub

Tensor = loud_stub("torchair.ge.Tensor")
TensorSpec = loud_stub("torchair.ge.TensorSpec")
DataType = loud_stub("torchair.ge.DataType")
