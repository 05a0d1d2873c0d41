"""`torchair.ge_concrete_graph.fx2ge_converter`: converter registration (recorded only, see `_registry`)."""
from torchair._registry import declare_supported, register_fx_node_ge_converter  # noqa: F401
