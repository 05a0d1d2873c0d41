"""Flexible Context Parallelism (FCP) for MindSpeed-MM."""

__version__ = "0.1.0"
