"""Runtime of the FCP MindSpeed feature (validation, patches, adapters); the feature is ``mindspeed_mm_fcp``."""
from mindspeed_mm_fcp.feature import FCP_CP_ALGO, FCPFeature

__all__ = ["FCPFeature", "FCP_CP_ALGO"]
