"""A tiny random Qwen3-VL, its tokenizer/processor and a small image+video dataset, all built locally.

Nothing is downloaded: the model folder is made with transformers' `Qwen3VLConfig` and saved with fp32 random
weights (a fixed seed), the tokenizer is a byte-level BPE trained here with the `tokenizers` library and wrapped as
`Qwen2TokenizerFast` with Qwen's special tokens, the processor is `Qwen3VLProcessor` (`Qwen2VLImageProcessor`,
`Qwen3VLVideoProcessor`). The weights are saved (and loaded by upstream's `from_pretrained`) rather than
initialised on the meta device, because meta-device initialisation on several CPU ranks draws different initial
weights per world size (DTensor random ops on a CPU mesh), which would make losses incomparable across topologies.

Runs in the upstream interpreter (it needs transformers, tokenizers, PIL and av); `python tiny_qwen3vl.py OUT`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)
VOCAB_SIZE = 320
CORPUS = (
    "A small red square sits on a blue field. The camera slowly pans from left to right. "
    "Describe the picture in one sentence. What happens in the video? Please describe the image. "
    "A cat walks across the room, then stops near the window and looks outside at the garden. "
    "Numbers 0 1 2 3 4 5 6 7 8 9 and seconds like <0.5 seconds> <1.0 seconds> appear in timestamps. "
    "user assistant system: the quick brown fox jumps over the lazy dog, again and again."
)
TEXT_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  rope_theta=10000.0, rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3],
                                                    "mrope_interleaved": True})
VISION_SHAPE = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=16,
                    spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=64,
                    deepstack_visual_indexes=[0])
LONG_VIDEO_FRAMES = 64
"""Most frames the processor keeps per video (the recipes' `video_maxlen` caps them first)."""
LONG_VIDEO_PIXELS = 128 * 128 * LONG_VIDEO_FRAMES
"""Most pixels of a whole video (all frames) the processor keeps: 64 frames of 128 x 128."""
MOE_SHAPE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                 mlp_only_layers=[], norm_topk_prob=True)
"""The MoE text decoder's experts (Qwen3-VL-MoE, `model_id: qwen3_vl_moe`): every layer sparse, 4 experts, top 2."""
MODEL_SUMMARY = {"vit_layers": 2, "llm_layers": 2, "llm_hidden": 64, "llm_heads": 4, "llm_kv_heads": 2,
                 "vit_hidden": 32, "vit_heads": 2, "vocab_size": VOCAB_SIZE}


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    raw.train_from_iterator([CORPUS] * 4, trainer=trainer)
    return Qwen2TokenizerFast(
        tokenizer_object=raw, unk_token=None, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]), model_max_length=4096,
    )


def build_processor(tokenizer):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(
        patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=32 * 32, max_pixels=128 * 128,
        size={"shortest_edge": 32 * 32, "longest_edge": 128 * 128}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16, temporal_patch_size=2, merge_size=2, size={"shortest_edge": 32 * 32, "longest_edge": LONG_VIDEO_PIXELS},
        image_mean=[0.5] * 3, image_std=[0.5] * 3, fps=2, min_frames=4, max_frames=LONG_VIDEO_FRAMES,
    )
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor)


def _upstream_expert_layout(state: dict) -> dict:
    """Hugging Face's MoE expert weights `[experts, in, out]` as MindSpeed-MM's Qwen3-VL-MoE holds them,
    `[experts * in, out]` (the same memory; upstream views them back per expert)."""
    return {name: tensor.reshape(-1, tensor.shape[-1]).contiguous() if name.endswith(("experts.gate_up_proj",
            "experts.down_proj")) else tensor for name, tensor in state.items()}


def build_model_folder(out: Path, seed: int = 1234, moe: bool = False) -> Path:
    """Save config, fp32 random weights, tokenizer and processor under `out`; returns `out`. With `moe`, the
    decoder is Qwen3-VL-MoE's (`MOE_SHAPE`), its expert weights saved in MindSpeed-MM's layout."""
    import torch
    from transformers import (Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLMoeConfig,
                              Qwen3VLMoeForConditionalGeneration)

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}
    config_class, model_class = ((Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration) if moe
                                 else (Qwen3VLConfig, Qwen3VLForConditionalGeneration))
    config = config_class(
        text_config=dict(vocab_size=VOCAB_SIZE, tie_word_embeddings=False, **TEXT_SHAPE, **(MOE_SHAPE if moe else {})),
        vision_config=VISION_SHAPE, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = model_class(config).float()
    state = _upstream_expert_layout(model.state_dict()) if moe else None
    model.save_pretrained(out, safe_serialization=True, state_dict=state)
    tokenizer.save_pretrained(out)
    build_processor(tokenizer).save_pretrained(out)
    summary = {**MODEL_SUMMARY, "parameters": sum(p.numel() for p in model.parameters())}
    if moe:
        summary.update(experts=MOE_SHAPE["num_experts"], experts_per_token=MOE_SHAPE["num_experts_per_tok"])
    (out / "tiny_summary.json").write_text(json.dumps(summary, indent=1))
    return out


def _image(path: Path, width: int, height: int, seed: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB").save(path)


def _video(path: Path, frames: int, size: int, fps: int, seed: int) -> None:
    import av
    import numpy as np

    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


_ANSWERS = (
    "A small red square sits on a blue field.",
    "A cat walks across the room, then stops near the window and looks outside at the garden.",
    "The quick brown fox jumps over the lazy dog.",
    "The camera slowly pans from left to right, again and again.",
)


WORKLOADS = ("mixed", "images", "short_videos", "long_videos")
"""Datasets the builder writes: images and short videos alternating; images only; short videos only; every
fourth sample a long video among images and short videos alternating."""


def build_dataset(out: Path, num_samples: int = 16, long_video_every: int = 0, workload: str = "mixed") -> Path:
    """Images (PIL) and short videos (av, mpeg4) plus `data.json` in MindSpeed-MM's llava-style message format.

    `mixed`: samples alternate image / video; `images` / `short_videos`: only those; every sample has both
    `images` and `videos` lists (one of them empty), so the recipe keeps `attr.images: images` and `attr.videos:
    videos`. With `long_video_every=k` (`long_videos`: k = 4), every k-th sample is a long video instead: 96
    frames of 128 x 128 at 4 fps (24 s; at 2 fps and `video_maxlen: 64`, 48 frames, about 400 tokens, several
    times the other samples).
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    if workload == "long_videos":
        long_video_every = long_video_every or 4
    out.mkdir(parents=True, exist_ok=True)
    samples = []
    for i in range(num_samples):
        answer = " ".join(_ANSWERS[(i + j) % len(_ANSWERS)] for j in range(1 + i % 3))
        image = workload == "images" or (workload != "short_videos" and i % 2 == 0)
        if long_video_every and i % long_video_every == long_video_every - 1:
            name = f"long_video_{i}.mp4"
            _video(out / name, frames=96, size=128, fps=4, seed=i)
            samples.append({"messages": [{"role": "user", "content": "<video>What happens in the video?"},
                                         {"role": "assistant", "content": answer}],
                            "images": [], "videos": [name]})
        elif image:
            name = f"image_{i}.png"
            _image(out / name, width=64 + 32 * (i % 3), height=64, seed=i)
            samples.append({"messages": [{"role": "user", "content": "<image>Please describe the image."},
                                         {"role": "assistant", "content": answer}],
                            "images": [name], "videos": []})
        else:
            name = f"video_{i}.mp4"
            _video(out / name, frames=8, size=64, fps=4, seed=i)
            samples.append({"messages": [{"role": "user", "content": "<video>What happens in the video?"},
                                         {"role": "assistant", "content": answer}],
                            "images": [], "videos": [name]})
    path = out / "data.json"
    path.write_text(json.dumps(samples, indent=1))
    return path


def main(argv: list[str]) -> int:
    """`python tiny_qwen3vl.py OUT [--long-videos | --workload NAME] [--moe]`: the model in OUT/hf, the data in
    OUT/data (`WORKLOADS`; `--long-videos` is `--workload long_videos`; with `--moe`, the MoE model)."""
    root = Path(argv[1])
    options = argv[2:]
    workload = "long_videos" if "--long-videos" in options else "mixed"
    if "--workload" in options:
        workload = options[options.index("--workload") + 1]
    build_model_folder(root / "hf", moe="--moe" in options)
    build_dataset(root / "data", workload=workload)
    print(json.dumps({"hf": str(root / "hf"), "data": str(root / "data" / "data.json")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
