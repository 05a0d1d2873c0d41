"""Converter registration of torchair's graph mode.

Registering a GE converter only records it: converters are consulted when a graph is compiled for the Ascend
graph engine, which never happens on the host (any use of the graph API itself is a loud stub).
"""
CONVERTERS: dict = {}
DECLARATIONS: dict = {}


def register_fx_node_ge_converter(op):
    def record(converter):
        CONVERTERS[op] = converter
        return converter

    return record


def declare_supported(declarations):
    def record(converter):
        DECLARATIONS[converter] = declarations
        return converter

    return record
