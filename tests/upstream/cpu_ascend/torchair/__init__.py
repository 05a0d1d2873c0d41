"""`torchair` (Ascend graph mode) is import-only on the CPU bed.

The names MindSpeed's op builders import exist (`ge`, `register_fx_node_ge_converter`, `ge_concrete_graph.*`);
converter registration only records the converter (`_registry.py`); everything else is a loud stub
that raises NotImplementedError naming itself when called. There is no catch-all
`__getattr__`: MindSpeed's patcher probes every loaded module with `hasattr`, which must answer False here.
"""
from torchair import ge  # noqa: F401
from torchair import ge_concrete_graph  # noqa: F401
from torchair._registry import register_fx_node_ge_converter  # noqa: F401
