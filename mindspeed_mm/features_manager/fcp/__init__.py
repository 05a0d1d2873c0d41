"""MindSpeed feature that enables Flexible Context Parallelism (``--context-parallel-algo fcp_cp_algo``)."""
from .fcp_feature import FCP_CP_ALGO, FCPFeature

__all__ = ["FCPFeature", "FCP_CP_ALGO"]
