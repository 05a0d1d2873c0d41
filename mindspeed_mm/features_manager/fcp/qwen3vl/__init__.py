"""The Qwen3-VL family's model adapter (dense `qwen3_vl` and MoE `qwen3_vl_moe`): what is Qwen3-VL's of an FCP run."""
