"""Context parallelism: the sequence split over the CP group, K/V all-gathered for attention.

Load balance follows Megatron-LM (`get_batch_on_this_cp_rank`, megatron-facts.md §7.1): the
sequence is cut into 2·cp equal chunks and CP rank i keeps chunks i and 2·cp-1-i, so every
rank gets one cheap (early) and one expensive (late) chunk of the causal triangle.

Attention exchanges keys and values with an all-gather (Megatron's ``cp_comm_type
all_gather``): `all_gather_single_autograd` gathers them in rank order and its backward
reduce-scatters their gradients. A ring (``p2p``) exchange is not implemented; plans that
ask for it run the all-gather, which moves the same bytes without the overlap. torch's
``context_parallel`` API does not run on CPU (torch-distributed-on-cpu.md §5), hence
plain collectives.

Because each rank holds two non-adjacent chunks, causality is an explicit mask built from
global token positions: a query at position p sees the keys at positions <= p.

Shape legend: B batch, H query heads, G key/value heads, S local sequence (seq / cp),
K head dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed import _functional_collectives as funcol

from specs.errors import SpecError


def zigzag_chunk_ids(cp: int, cp_rank: int) -> tuple[int, int]:
    """The two of the 2·cp sequence chunks that CP rank ``cp_rank`` holds."""
    return cp_rank, 2 * cp - 1 - cp_rank


def zigzag_positions(seq_length: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Global positions (in order) of the tokens CP rank ``cp_rank`` holds."""
    if seq_length % (2 * cp):
        raise SpecError(
            f"seq_length ({seq_length}) must be divisible by 2·cp = {2 * cp} for the "
            "load-balanced context-parallel split (Megatron rule); pad the sequence or "
            "choose a cp that divides seq_length / 2"
        )
    chunk = seq_length // (2 * cp)
    first, second = zigzag_chunk_ids(cp, cp_rank)
    return torch.cat(
        [
            torch.arange(first * chunk, (first + 1) * chunk),
            torch.arange(second * chunk, (second + 1) * chunk),
        ]
    )


def zigzag_split(tokens_BS: torch.Tensor, cp: int, cp_rank: int) -> torch.Tensor:
    """This rank's share of a batch of full sequences along dim 1: (B, S) -> (B, S / cp)."""
    positions = zigzag_positions(tokens_BS.shape[1], cp, cp_rank).to(tokens_BS.device)
    return tokens_BS.index_select(1, positions)


@dataclass(frozen=True, kw_only=True, slots=True)
class SequenceLayout:
    """Global positions of the tokens a CP rank holds, and of the gathered keys."""

    positions: torch.Tensor
    """(S,) positions of this rank's tokens, in the order they are held."""
    key_positions: torch.Tensor
    """(cp·S,) positions of the all-gathered keys: every rank's `positions`, in rank order."""

    @classmethod
    def zigzag(cls, seq_length: int, cp: int, cp_rank: int, device: torch.device):
        """Layout of CP rank ``cp_rank`` for sequences of ``seq_length`` tokens."""
        keys = torch.cat([zigzag_positions(seq_length, cp, r) for r in range(cp)])
        return cls(
            positions=zigzag_positions(seq_length, cp, cp_rank).to(device),
            key_positions=keys.to(device),
        )

    def causal_mask(self) -> torch.Tensor:
        """(S, cp·S) boolean mask, True where a query may attend to a key."""
        return self.key_positions[None, :] <= self.positions[:, None]


class ContextParallelAttention(nn.Module):
    """Causal attention core over a sequence split across the CP group.

    Forward: all-gather K and V (B, G, S, K) -> (B, G, cp·S, K) over the CP group, then SDPA
    of the local queries against every key with the positional causal mask. Backward: the
    all-gather's reduce-scatter returns each rank the gradient of its own K and V.
    """

    def __init__(self, *, group: dist.ProcessGroup, layout: SequenceLayout) -> None:
        super().__init__()
        self.group = group
        self.layout = layout
        self._mask = layout.causal_mask()

    def forward(self, q_BHSK: torch.Tensor, k_BGSK: torch.Tensor, v_BGSK: torch.Tensor):
        # gloo gathers only along dim 0: gather sequence-major copies, then permute back.
        k_all = _gather_sequence(k_BGSK, self.group)  # (B, G, cp·S, K)
        v_all = _gather_sequence(v_BGSK, self.group)  # (B, G, cp·S, K)
        mask = self._mask.to(q_BHSK.device)
        gqa = q_BHSK.shape[1] != k_all.shape[1]
        return F.scaled_dot_product_attention(q_BHSK, k_all, v_all, attn_mask=mask, enable_gqa=gqa)


def _gather_sequence(x_BGSK: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """All-gather along the sequence dim with autograd: (B, G, S, K) -> (B, G, cp·S, K)."""
    world = dist.get_world_size(group)
    x_SBGK = x_BGSK.permute(2, 0, 1, 3).contiguous()  # (S, B, G, K)
    gathered = funcol.all_gather_single_autograd(x_SBGK, gather_dim=0, group=group)
    gathered = funcol.wait_tensor(gathered)  # (cp·S, B, G, K), rank-major
    assert gathered.shape[0] == world * x_BGSK.shape[2]
    return gathered.permute(1, 2, 0, 3)  # (B, G, cp·S, K)
