"""Thin adapters that put the FCP executor into Megatron's functions (see `..patches` for the targets)."""
