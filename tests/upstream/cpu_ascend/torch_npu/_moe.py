"""The MoE operators of MindSpeed-MM's fused expert path (`Qwen3VLNpuFusedMoETextExperts`, `fused_ep_forward`), with
their documented semantics (CANN aclnnMoeTokenPermute / aclnnMoeTokenUnpermute, torch_npu.npu_swiglu,
torch_npu.npu_grouped_matmul). Written with differentiable torch operations where the NPU operators are
differentiable (permute, unpermute, swiglu); `npu_grouped_matmul` is forward-only, as upstream's `GmmFunction`
calls it from its own autograd function.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_npu._trace import count


def npu_moe_token_permute(tokens: torch.Tensor, indices: torch.Tensor, num_out_tokens: int | None = None,
                          padded_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies every token once per expert it is routed to and groups the copies by expert.

    `tokens` `[N, H]`; `indices` `[N, topK]` (or `[N]`, topK 1) the experts of each token. With
    `sorted_first = argsort(flatten(indices))` (stable) and `sorted_indices = argsort(sorted_first)`,
    `permuted[sorted_indices[i]] = tokens[i // topK]`. Returns (`permuted` `[N * topK, H]`, or its first
    `num_out_tokens` rows when given, and `sorted_indices` int32 `[N * topK]`)."""
    count("npu_moe_token_permute")
    if padded_mode:
        raise NotImplementedError("cpu_ascend torch_npu.npu_moe_token_permute: padded_mode=True is not supported "
                                  "(nor by the operator's current documentation)")
    if indices.dim() not in (1, 2) or tokens.dim() != 2 or indices.shape[0] != tokens.shape[0]:
        raise ValueError(f"npu_moe_token_permute: tokens [N, H] and indices [N, topK] or [N], got "
                         f"{tuple(tokens.shape)} and {tuple(indices.shape)}")
    top_k = 1 if indices.dim() == 1 else indices.shape[1]
    sorted_first = torch.argsort(indices.reshape(-1), stable=True)
    sorted_indices = torch.argsort(sorted_first, stable=True).to(torch.int32)
    permuted = tokens.index_select(0, sorted_first // top_k)
    if num_out_tokens:
        permuted = permuted[:num_out_tokens]
    return permuted, sorted_indices


def npu_moe_token_unpermute(permuted_tokens: torch.Tensor, sorted_indices: torch.Tensor,
                            probs: torch.Tensor | None = None, padded_mode: bool = False,
                            restore_shape: torch.Size | None = None) -> torch.Tensor:
    """The inverse of `npu_moe_token_permute`, weighting and summing each token's copies.

    `T[k] = permuted_tokens[sorted_indices[k]]`, times `probs[k // topK][k % topK]` when `probs` (`[N, topK]`) is
    given (topK 1 otherwise), and `out[i] = sum of T[i * topK .. (i + 1) * topK - 1]`: `[N, H]` in the dtype of
    `permuted_tokens`."""
    count("npu_moe_token_unpermute")
    if padded_mode:
        raise NotImplementedError("cpu_ascend torch_npu.npu_moe_token_unpermute: padded_mode=True is not supported")
    top_k = 1 if probs is None else probs.shape[1]
    gathered = permuted_tokens.index_select(0, sorted_indices.to(torch.int64))  # [N * topK, H]
    if probs is not None:
        gathered = gathered * probs.reshape(-1, 1).to(gathered.dtype)
    return gathered.reshape(-1, top_k, permuted_tokens.shape[-1]).sum(dim=1)


def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """`swish(A) * B = A * sigmoid(A) * B`, `A` and `B` the first and second half of `x` along `dim`."""
    count("npu_swiglu")
    first, second = x.chunk(2, dim=dim)
    return F.silu(first) * second


def _group_bounds(group_list, group_list_type: int) -> list[int]:
    sizes = [int(n) for n in (group_list.tolist() if isinstance(group_list, torch.Tensor) else group_list)]
    if group_list_type == 0:  # cumulative ends
        return [0] + sizes
    if group_list_type == 1:  # counts
        bounds = [0]
        for size in sizes:
            bounds.append(bounds[-1] + size)
        return bounds
    raise NotImplementedError(f"cpu_ascend torch_npu.npu_grouped_matmul: group_list_type {group_list_type}")


def npu_grouped_matmul(x, weight, *, bias=None, group_list=None, split_item: int = 0, group_type: int = -1,
                       group_list_type: int = 0, **kwargs) -> list[torch.Tensor]:
    """Grouped matmul, the single-tensor forms MindSpeed-MM's `GmmFunction` uses (no bias, no quantisation):

    - `group_type` 0 (groups along M): `x = [X [M, K]]`, `weight = [W [G, K, N]]`; rows `group g` of X times
      `W[g]`, one output `[M, N]` (`split_item` 2 or 3);
    - `group_type` 2 (groups along K): `x = [X [K1, M]]`, `weight = [W [M, N]]`; columns of group g of X times the
      rows of group g of W, one output `[G, K1, N]` (`split_item` 3).

    `group_list`: per group its size (`group_list_type` 1) or cumulative end (`group_list_type` 0)."""
    count("npu_grouped_matmul")
    unsupported = {name: value for name, value in kwargs.items() if value not in (None, [], 0)}
    if bias is not None or unsupported or len(x) != 1 or len(weight) != 1 or group_list is None:
        raise NotImplementedError("cpu_ascend torch_npu.npu_grouped_matmul: only one x, one weight, a group_list, "
                                  f"no bias or quantisation (got bias={bias is not None}, {sorted(unsupported)})")
    (a,), (b,) = x, weight
    bounds = _group_bounds(group_list, group_list_type)
    if group_type == 0 and split_item in (2, 3):
        if b.dim() != 3 or len(bounds) - 1 != b.shape[0] or bounds[-1] != a.shape[0]:
            raise ValueError(f"npu_grouped_matmul (groups along M): x {tuple(a.shape)}, weight {tuple(b.shape)}, "
                             f"group ends {bounds[1:]}")
        out = a.new_empty(a.shape[0], b.shape[-1])
        for g, (start, stop) in enumerate(zip(bounds, bounds[1:])):
            out[start:stop] = a[start:stop] @ b[g]
        return [out]
    if group_type == 2 and split_item == 3:
        if b.dim() != 2 or bounds[-1] != a.shape[1] or bounds[-1] != b.shape[0]:
            raise ValueError(f"npu_grouped_matmul (groups along K): x {tuple(a.shape)}, weight {tuple(b.shape)}, "
                             f"group ends {bounds[1:]}")
        return [torch.stack([a[:, start:stop] @ b[start:stop] for start, stop in zip(bounds, bounds[1:])])]
    raise NotImplementedError(f"cpu_ascend torch_npu.npu_grouped_matmul: group_type {group_type} with split_item "
                              f"{split_item}")
