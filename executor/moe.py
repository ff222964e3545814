"""Mixture-of-experts layer: top-k softmax router, experts sharded over the EP group,
all-to-all token dispatch and combine, optional capacity dropping and shared expert.

Routing (Mixtral / Megatron ``topk`` with softmax after top-k): the router's logits pick
the top-k experts of each token; the k selected logits are softmax-normalized into the
combine weights.

Load-balancing loss (Switch Transformer / GShard, Megatron ``aux_loss``):
aux = E · Σ_e f_e · P_e, with f_e the fraction of the k·T routing choices that went to
expert e and P_e the mean router probability of e over the T tokens of the micro-batch.
When a micro-batch's sequences are split over ranks (context parallelism, or sequence
parallelism over TP), the counts are all-reduced over that ``sequence_group`` first (as
Megatron reduces over its tp-cp group), so every split computes the same statistic; each
rank then contributes the share of P_e that its own tokens carry. The loss never enters
the reported LM loss: `AuxLossGradient` adds its gradient in backward (Megatron's
``MoEAuxLossAutoScaler``), scaled by ``aux_loss_coeff · aux_grad_scale``, where the engine sets
``aux_grad_scale`` to cp / (micro-batches it divides the loss by).

Capacity (``moe_capacity_factor`` set): each expert keeps at most
ceil(T · k / E · factor) of this rank's routing choices, those with the largest combine
weight (Megatron's ``probs`` drop policy); dropped choices contribute nothing. Without a
factor routing is dropless.

Expert parallelism: rank r of the EP group holds experts [r·E/ep, (r+1)·E/ep). Tokens are
sorted by expert, the per-expert counts are exchanged with ``all_to_all_single``, and the
tokens travel with ``all_to_all_single_autograd`` in uneven splits (torch-distributed-on-cpu.md
§1: uneven and empty splits work on gloo); results come back the same way.

Capacity is computed on each rank's own tokens (Megatron's ``get_capacity``), so when
context or sequence parallelism splits a micro-batch, tokens are dropped per shard.

Shape legend: B batch, S sequence, T tokens on this rank (B·S), D hidden, E experts,
K top-k, L local experts (E / ep), P ranks of the EP group, F expert inner size,
A routing choices kept (at most T·K), R choices received from the EP group.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed import _functional_collectives as funcol

from specs.errors import SpecError
from specs.model import ModelSpec

DEFAULT_AUX_LOSS_COEFF = 1e-2
"""Load-balancing loss weight (the value Mixtral-style Megatron recipes use)."""


class AuxLossGradient(torch.autograd.Function):
    """Identity on ``output``; in backward, adds d(scale · aux)/d(aux) = scale to ``aux``."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, aux: torch.Tensor, scale: float):
        ctx.scale = scale
        ctx.aux_shape = aux.shape
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_aux = torch.full(ctx.aux_shape, ctx.scale, device=grad_output.device)
        return grad_output, grad_aux, None


class Experts(nn.Module):
    """The local experts, weights stacked along a leading expert dim."""

    def __init__(self, spec: ModelSpec, num_local: int, first_expert: int) -> None:
        super().__init__()
        hidden, ffn = spec.hidden_size, spec.expert_ffn_hidden_size
        self.first_expert = first_expert
        self.w1 = nn.Parameter(torch.empty(num_local, ffn, hidden))  # (L, F, D)
        swiglu = spec.activation == "swiglu"
        self.w3 = nn.Parameter(torch.empty(num_local, ffn, hidden)) if swiglu else None
        self.w2 = nn.Parameter(torch.empty(num_local, hidden, ffn))  # (L, D, F)

    def init_experts(
        self, normal_: Callable[[torch.Tensor, float, str], None], std: float, out_std: float
    ) -> None:
        """Seed each slice by its global expert index (``normal_(tensor, std, name)``);
        the down projection w2 gets ``out_std``."""
        for j in range(self.w1.shape[0]):
            e = self.first_expert + j
            normal_(self.w1[j], std, f"w1[{e}]")
            if self.w3 is not None:
                normal_(self.w3[j], std, f"w3[{e}]")
            normal_(self.w2[j], out_std, f"w2[{e}]")

    def forward(self, x_RD: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Rows of ``x_RD`` sorted by local expert, ``counts[j]`` rows for expert j.

        Each stacked weight is unbound once: its backward stacks the experts' gradients
        into one buffer, where indexing ``w[j]`` per expert would zero-fill a gradient of
        the whole stack for every expert and sum them."""
        w1, w2 = self.w1.unbind(0), self.w2.unbind(0)
        w3 = self.w3.unbind(0) if self.w3 is not None else None
        outputs = []
        for j, x_jD in enumerate(torch.split(x_RD, counts)):
            gate_jF = x_jD @ w1[j].t()
            if w3 is None:
                outputs.append(F.gelu(gate_jF) @ w2[j].t())
                continue
            h_jF = F.silu(gate_jF) * (x_jD @ w3[j].t())
            outputs.append(h_jF @ w2[j].t())
        return torch.cat(outputs) if outputs else x_RD


class MoE(nn.Module):
    """Routed experts (plus an optional shared expert) replacing a layer's MLP."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        ep_size: int = 1,
        ep_rank: int = 0,
        shared_expert: nn.Module | None = None,
        aux_loss_coeff: float = DEFAULT_AUX_LOSS_COEFF,
    ) -> None:
        super().__init__()
        if spec.num_experts % ep_size:
            raise SpecError(
                f"num_experts ({spec.num_experts}) must be divisible by ep ({ep_size}) "
                "(Megatron rule); choose ep among the divisors of num_experts"
            )
        self.num_experts = spec.num_experts
        self.top_k = spec.moe_top_k
        self.capacity_factor = spec.moe_capacity_factor
        self.num_local = spec.num_experts // ep_size
        self.router = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)
        self.experts = Experts(spec, self.num_local, ep_rank * self.num_local)
        self.shared_expert = shared_expert
        self.aux_loss_coeff = aux_loss_coeff
        self.aux_grad_scale = 1.0
        """Set by the engine before each step: cp / (micro-batches the loss is divided by)."""
        self.ep_group: dist.ProcessGroup | None = None
        """Expert-parallel group; None keeps every expert local (ep = 1)."""
        self.sequence_group: dist.ProcessGroup | None = None
        """Ranks holding parts of the same sequences (cp, and tp under SP); None if none."""

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x_BSD.shape
        logits_BSE = self.router(x_BSD)
        x_TD = x_BSD.reshape(-1, hidden)  # (T, D)
        logits_TE = logits_BSE.reshape(-1, self.num_experts).float()  # (T, E)
        top_logits_TK, experts_TK = logits_TE.topk(self.top_k, dim=-1)
        weights_TK = top_logits_TK.softmax(dim=-1)
        keep_TK = self._capacity_mask(weights_TK, experts_TK)
        tokens_A = torch.arange(x_TD.shape[0], device=x_TD.device).repeat_interleave(self.top_k)
        tokens_A, experts_A, weights_A = (
            t[keep_TK.reshape(-1)]
            for t in (tokens_A, experts_TK.reshape(-1), weights_TK.reshape(-1))
        )
        order = torch.argsort(experts_A, stable=True)
        tokens_A, experts_A, weights_A = tokens_A[order], experts_A[order], weights_A[order]
        counts_E = torch.bincount(experts_A, minlength=self.num_experts)
        y_AD = self._dispatch_compute_combine(x_TD[tokens_A], counts_E)
        weighted_AD = (y_AD * weights_A[:, None]).to(x_TD.dtype)
        out_TD = torch.zeros_like(x_TD).index_add(0, tokens_A, weighted_AD)
        out_BSD = out_TD.view(batch, seq, hidden)
        if self.shared_expert is not None:
            out_BSD = out_BSD + self.shared_expert(x_BSD)
        if torch.is_grad_enabled() and self.aux_loss_coeff:
            aux = self._aux_loss_share(logits_TE.softmax(dim=-1), experts_TK)
            out_BSD = AuxLossGradient.apply(out_BSD, aux, self.aux_loss_coeff * self.aux_grad_scale)
        return out_BSD

    def _aux_loss_share(self, probs_TE: torch.Tensor, experts_TK: torch.Tensor) -> torch.Tensor:
        """This rank's share of the load-balancing loss of its micro-batch (see module doc)."""
        counts_E = torch.bincount(experts_TK.reshape(-1), minlength=self.num_experts)
        total = probs_TE.shape[0]  # the micro-batch's tokens: equal shards over the group
        if self.sequence_group is not None:
            dist.all_reduce(counts_E, group=self.sequence_group)
            total *= dist.get_world_size(self.sequence_group)
        scale = self.num_experts / (self.top_k * total * total)
        return scale * (counts_E.to(probs_TE.dtype) * probs_TE.sum(dim=0)).sum()

    def _capacity_mask(self, weights_TK: torch.Tensor, experts_TK: torch.Tensor) -> torch.Tensor:
        """True for the routing choices each expert keeps under the capacity factor."""
        keep_TK = torch.ones_like(experts_TK, dtype=torch.bool)
        if self.capacity_factor is None:
            return keep_TK
        tokens = experts_TK.shape[0]
        capacity = math.ceil(tokens * self.top_k / self.num_experts * self.capacity_factor)
        if capacity >= tokens:
            return keep_TK
        chosen_TE = torch.zeros(tokens, self.num_experts, device=weights_TK.device)
        chosen_TE.scatter_(1, experts_TK, weights_TK.detach() + 1.0)  # > 0 where chosen
        keep_idx_CE = chosen_TE.topk(capacity, dim=0).indices  # (capacity, E)
        kept_TE = torch.zeros_like(chosen_TE, dtype=torch.bool)
        kept_TE.scatter_(0, keep_idx_CE, True)
        kept_TE &= chosen_TE > 0
        return kept_TE.gather(1, experts_TK)

    def _dispatch_compute_combine(self, x_AD: torch.Tensor, counts_E: torch.Tensor):
        """Run each routing choice (rows sorted by expert) through its expert."""
        if self.ep_group is None:
            return self.experts(x_AD, counts_E.tolist())
        ep = dist.get_world_size(self.ep_group)
        send_counts_PL = counts_E.view(ep, self.num_local)  # rows: destination EP rank
        recv_counts_PL = torch.empty_like(send_counts_PL)  # rows: source EP rank
        dist.all_to_all_single(recv_counts_PL, send_counts_PL, group=self.ep_group)
        send_splits = send_counts_PL.sum(dim=1).tolist()
        recv_splits = recv_counts_PL.sum(dim=1).tolist()
        x_RD = _all_to_all(x_AD, recv_splits, send_splits, self.ep_group)
        # Received rows are grouped by source rank, then local expert: regroup by expert.
        local_expert_R = torch.arange(self.num_local, device=x_AD.device).repeat(ep)
        local_expert_R = local_expert_R.repeat_interleave(recv_counts_PL.reshape(-1))
        order_R = torch.argsort(local_expert_R, stable=True)
        y_sorted_RD = self.experts(x_RD[order_R], recv_counts_PL.sum(dim=0).tolist())
        y_RD = y_sorted_RD[torch.argsort(order_R)]
        return _all_to_all(y_RD, send_splits, recv_splits, self.ep_group)


def _all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group):
    """Differentiable uneven all-to-all along dim 0, waited on."""
    out = funcol.all_to_all_single_autograd(x.contiguous(), out_splits, in_splits, group)
    return funcol.wait_tensor(out)
