"""Round runner of the VLM: the group's videos are split over its ranks and exchanged by the product's machinery
(`core/fcp/runtime/media_exchange`), each rank loading only the frame groups it encodes, then every rank's decoder
runs on its zigzag shard with the vision tokens of that shard in place."""
from __future__ import annotations

import torch
import torch.distributed as dist

from mindspeed_mm.core.fcp.runtime.media_exchange import VisionTower, encode_all, encode_media_in_group
from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRound, FCPRuntime
from mindspeed_mm.core.fcp.sandbox.round_runner import RoundForward, RoundRunner
from mindspeed_mm.core.fcp.sandbox.sampler import PlanAwareSampler
from mindspeed_mm.core.fcp.sandbox.vision.encoder import FrameBatch
from mindspeed_mm.core.fcp.sandbox.vision.video_dataset import VideoCaptionDataset, VideoSample
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
        patches: dict[int, int] = {}
        vision_tokens = self._vision_tokens(batch, process_group, patches)
        params = batch.packed_seq_params.to(self.device)
        token_losses = self.vlm(
            batch.tokens.to(self.device),
            batch.labels.to(self.device),
            vision_tokens,
            batch.vision_positions.to(self.device),
            params,
        )
        return RoundForward(
            token_losses=token_losses,
            loss_mask=batch.loss_mask.to(self.device),
            sample_ids=batch.sample_ids,
            vision_patches=patches,
        )

    def _vision_tokens(self, batch: VLMShardBatch, group: dist.ProcessGroup | None,
                       patches: dict[int, int]) -> torch.Tensor:
        """`[vision tokens of this rank's shard, hidden]`, shard order; `patches` receives the patches this rank
        encoded per sample, counted from the frame groups actually loaded."""
        media = batch.media
        merge = self.vlm.vision.vision.spatial_merge_size

        def pixels(start: int, stop: int) -> torch.Tensor:
            loaded = []
            for sample, frame_group in media.frame_groups(start, stop):
                loaded.append(self.videos.frame_group(sample, frame_group))
                patches[sample] = patches.get(sample, 0) + loaded[-1].shape[0]
            return torch.cat(loaded).to(self.device)

        def encode(pixel_rows: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
            return self.vlm.encode(FrameBatch.from_grids(pixel_rows, grids, merge).to(self.device))

        def stand_in() -> torch.Tensor:
            # A rank encoding nothing needs no tower call here (no FSDP); a leaf keeps it in the exchange's backward.
            return torch.zeros((), device=self.device, requires_grad=True)

        tower = VisionTower(encode=encode, stand_in=stand_in, merge_area=merge * merge,
                            row_width=self.vlm.decoder.config.hidden_size, pixel_width=self.vlm.vision.vision.patch_dim)
        if group is None:
            rows, _ = encode_all(tower, pixels, list(media.items))
            return rows[batch.needed_rows[0].to(rows.device)]
        rows, _ = encode_media_in_group(tower, pixels, list(media.items), batch.needed_rows, batch.rank_in_group,
                                        group)
        return rows
