"""`torchair.ge_concrete_graph.ge_graph`: loud stubs."""
from torch_npu._ops import loud_stub

_NAMES = ("Tensor", "TensorSpec", "DataType", "get_invalid_desc", "get_default_ge_graph", "next_unique_name",
          "compat_as_bytes")
for _name in _NAMES:
    globals()[_name] = loud_stub(f"torchair.ge_concrete_graph.ge_graph.{_name}")
