"""Cost model of FCP: profile tables, hardware/model presets and the group time / memory model."""
from mindspeed_mm.core.fcp.cost.grid import Grid
from mindspeed_mm.core.fcp.cost.model import ALGOS, CostModel, ModelDoesNotFitError
from mindspeed_mm.core.fcp.cost.presets import build_preset_table, list_presets, preset_table
from mindspeed_mm.core.fcp.cost.table import SCHEMA_VERSION, ProfileTable, ProfileTableError
from mindspeed_mm.core.fcp.cost.workload import GroupWorkload, WorkloadColumns

__all__ = ["ALGOS", "SCHEMA_VERSION", "CostModel", "Grid", "GroupWorkload", "ModelDoesNotFitError",
           "ProfileTable", "ProfileTableError", "WorkloadColumns", "build_preset_table", "list_presets",
           "preset_table"]
