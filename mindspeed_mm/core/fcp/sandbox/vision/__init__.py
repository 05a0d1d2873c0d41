"""Vision-language FCP: a tiny Qwen3-VL-shaped model whose video encoder work is split per CP group.

Modules: `layout` (token layout and 3D mRoPE ids of a video-caption sample, from metadata),
`mrope_sections` (which rotary frequencies take the temporal / height / width position), `dataset`
(synthetic video-caption samples), `group_media` (a CP group's videos as the product's media split sees
them: the split over the group's ranks and the exchange of feature rows are the product's,
`core/fcp/runtime/media_exchange`), `encoder` (patch embedding, windowed ViT, merger), `rotary` (mRoPE of
the decoder), `model` (encoder + decoder), `round_batch`, `runner` (one rank's rounds),
`reference` (single-process reference training), `balance` (vision work per rank of a plan).
Like the executor package, this package imports nothing itself.
"""
