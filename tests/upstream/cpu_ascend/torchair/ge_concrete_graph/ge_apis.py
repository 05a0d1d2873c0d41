"""`torchair.ge_concrete_graph.ge_apis`: the GE operator namespace; nothing is implemented on the host."""
