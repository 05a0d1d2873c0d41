"""`torchair.ge_concrete_graph`: loud stubs."""
from torchair.ge_concrete_graph import fx2ge_converter, ge_apis, ge_graph, supported_declaration  # noqa: F401
