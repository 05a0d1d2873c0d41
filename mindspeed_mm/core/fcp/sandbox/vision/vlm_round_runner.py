"""Round runner of the VLM: each rank encodes its share of the group's frame groups, then the exchange
hands every rank the merged vision tokens of its zigzag shard before the decoder runs."""
from __future__ import annotations

import torch

from mindspeed_mm.core.fcp.sandbox.round_runner import RoundForward, RoundRunner
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRound, FCPRuntime
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoCaptionDataset, VideoSample
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch
from mindspeed_mm.core.fcp.sandbox.vision.exchange import exchange_vision_tokens
from mindspeed_mm.core.fcp.sandbox.vision.vlm_model import VisionLanguageModel
from mindspeed_mm.core.fcp.sandbox.vision.vlm_round_batch import VLMShardBatch, build_vlm_shard_batch


class VLMRoundRunner(RoundRunner):
    """`RoundRunner` whose forward pass splits the vision encoder over the round's group."""

    def __init__(
        self,
        model: VisionLanguageModel,
        sampler: PlanAwareSampler,
        runtime: FCPRuntime,
        device: torch.device,
    ) -> None:
        if not isinstance(sampler.dataset, VideoCaptionDataset):
            raise TypeError(f"VLMRoundRunner needs a VideoCaptionDataset, got {type(sampler.dataset).__name__}")
        super().__init__(model, sampler, runtime, device)
        self.vlm = model
        self.videos = sampler.dataset

    def forward_round(self, fcp_round: FCPRound, sample_indices: tuple[int, ...]) -> RoundForward:
        """Loads the group's text and this rank's frame groups, encodes, exchanges (over the CP group), runs the
        decoder (attending over the round's attention group)."""
        process_group = self.runtime.process_group(fcp_round)
        samples = [s for s in self.sampler.load(sample_indices) if isinstance(s, VideoSample)]
        if len(samples) != len(sample_indices):
            raise TypeError("VLMRoundRunner loads VideoSample items only")
        batch = build_vlm_shard_batch(
            samples,
            rank_in_group=fcp_round.rank_in_group,
            degree=fcp_round.degree,
            group=self.runtime.attention_group(fcp_round),
            algo=fcp_round.algo,
            kernel=self.runtime.settings.attention_kernel,
        )
        encoded, patches = self._encode(batch)
        vision_tokens = exchange_vision_tokens(encoded, batch.routing, process_group)
        params = batch.packed_seq_params.to(self.device)
        token_losses = self.vlm(
            batch.tokens.to(self.device),
            batch.labels.to(self.device),
            vision_tokens,
            batch.routing.recv_positions.to(self.device),
            params,
        )
        return RoundForward(
            token_losses=token_losses,
            loss_mask=batch.loss_mask.to(self.device),
            sample_ids=batch.sample_ids,
            vision_patches=patches,
        )

    def _encode(self, batch: VLMShardBatch) -> tuple[torch.Tensor, dict[int, int]]:
        """This rank's merged vision tokens (packed order) and the patches it encoded, per sample,
        counted from the frame groups actually loaded."""
        units = batch.encoded_units
        if not units:
            # Still a graph input, so that this rank joins the exchange's backward all-to-all.
            hidden = self.vlm.decoder.config.hidden_size
            return torch.zeros(0, hidden, device=self.device, requires_grad=True), {}
        loaded = [self.videos.frame_group(u.sample_index, u.group) for u in units]
        patches: dict[int, int] = {}
        for unit, frame_group in zip(units, loaded):
            patches[unit.sample_index] = patches.get(unit.sample_index, 0) + frame_group.shape[0]
        frames = FrameBatch.from_frame_groups(loaded, [self.videos.layout(u.sample_index) for u in units])
        return self.vlm.encode(frames.to(self.device)), patches
