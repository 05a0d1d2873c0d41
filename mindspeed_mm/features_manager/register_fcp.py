"""Importing this module adds the FCP feature to MindSpeed's features list (see the package docstring)."""
from mindspeed_mm.features_manager import enable_fcp

enable_fcp()
