"""Vision-language FCP: a tiny Qwen3-VL-shaped model whose video encoder work is split per CP group.

Modules: `layout` (token layout and 3D mRoPE ids of a video-caption sample, from metadata),
`mrope_sections` (which rotary frequencies take the temporal / height / width position), `dataset`
(synthetic video-caption samples), `frames` (frame groups of a CP group and their balanced
assignment to its ranks), `exchange` (routing of merged vision tokens to the zigzag shards, and the
differentiable all-to-all), `encoder` (patch embedding, windowed ViT, merger), `rotary` (mRoPE of
the decoder), `model` (encoder + decoder), `round_batch`, `runner` (one rank's rounds),
`reference` (single-process reference training), `balance` (vision work per rank of a plan).
Like the executor package, this package imports nothing itself.
"""
