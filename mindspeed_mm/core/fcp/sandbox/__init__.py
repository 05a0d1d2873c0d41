"""FCP executor: carries out a plan on megatron-core.

Modules: `config` (run YAML; its typed sections in `config_sections`, value checks in
`config_consistency`), `dataset` and `sampler` (synthetic data, plan-aware sample loading),
`planning`, `async_planner` and `step_plan_source` (which planner, one step ahead: the per-step plan
source of `fcp train` and of the features), `plan_check` (same executable plan on all ranks),
`packed_seq`, `rotary`, `attention` and `model` (megatron-core integration), `runtime` (the step
runtime of every driver: rounds, groups, round timing), `padding` and `packed_shard` (the one shard
function), `round_batch` and `runner` (`fcp train`'s rounds on one rank), `grad_sync`, `trainer` (the training loop),
`reference` (single-process reference), `results`, `log_format`, `memory`, `distributed`,
`optimizer`; the `vision` package holds the vision-language model (video encoder split over each CP
group, 3D mRoPE). Import the submodules directly: this package imports nothing, so reading a
configuration does not load torch.distributed or megatron-core.
"""
