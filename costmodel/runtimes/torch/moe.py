"""The executor's MoE layer (`executor.moe.MoE`) as an operator list
(`costmodel.runtimes.torch.ops`).

Per microbatch and rank, with Tm tokens routed here (the sequence shard under SP), E
experts, top-k, L = E / ep local experts, A = k·Tm routing choices (dropless; a capacity
factor c keeps at most k·Tm·c, capped at k·Tm) and, under expert parallelism, R = A rows
received (balanced routing), F_e the expert width:

- routing (forward, 28 recorded operators priced as routing bookkeeping,
  `HostRates.routing_op_s`, 12 of them writing activation-sized tensors, and 12 views,
  from `MoE.forward`): the router
  linear, top-k, softmax of the top logits, the keep mask (``ones_like``; the capacity path
  adds a scatter, a top-k and a gather), the token index (arange, repeat_interleave), three
  boolean and three order indexings, argsort, bincount, the token gather (2·A·D·e), the
  weighted outputs (3·A·D·e), ``zeros_like`` (T·D·e) and ``index_add`` (3·A·D·e), the
  shared-expert add and the load-balancing loss (softmax over E, bincount, cast, two sums,
  two products, its autograd function). Backward: 28 nodes, among them Topk and the token
  gather (zero-filled T·E and T·D gradients), the weighted product (two gradients,
  6·A·D·e), index_add's (2·A·D·e), the experts' split (a concatenation, 2·A·D·e) and the
  AccumulateGrad of the router and of the three stacked expert weights.
- the local experts (`Experts.forward`): each stacked weight is unbound once (one operator
  and L views); per expert three ``.t()`` views, three matmuls over its rows, silu (one
  transcendental kernel of its rows x F_e elements each way) and the product; backward
  three Mm (dgrad and wgrad), three T, Silu and Mul nodes per expert, and per stacked
  weight one Unbind node that stacks the L gradients (2·L·F_e·D·e), each the transpose of
  its product's result (the gradient of ``w[j].t()``), so the stack copies with a stride
  (`HostOps.transposed_bytes`).
- expert parallelism (`MoE._dispatch_compute_combine`): the count exchange (an
  all-to-all of E int64), the token all-to-all there and back (functional, with autograd:
  two all-to-alls backward as well, priced by the profile's autograd exchange,
  `HostRates.autograd_exchange_s`; per layer and pass in context instead when the profile
  probed the pattern, `costmodel.runtimes.torch.moe_exchange_rates`), the regrouping of received
  rows (arange, repeat, repeat_interleave, argsort, two index gathers of 2·R·D·e; 17 operators with
  the count sums and ``tolist`` calls, priced as routing bookkeeping) and their gradient scatters.
- the load-balancing counts are all-reduced over the tp·cp group when it has several ranks.
"""

from __future__ import annotations

from collections.abc import Sequence

from costmodel.runtimes.torch.ops import FP32, Comm, HostOps, ModuleOps, gemm_kernel_s, gradient_sum
from costmodel.runtimes.torch.shapes import RankShape
from profiles.schema import HardwareProfile
from specs.model import ModelSpec
from specs.plan import ParallelPlan

INT64 = 8
"""Bytes of the exchanged expert counts."""


def _routing(model: ModelSpec, profile: HardwareProfile, x: RankShape, rows: float) -> ModuleOps:
    """Router, dispatch bookkeeping, combine and load-balancing loss (module doc)."""
    d, e = model.hidden_size, model.num_experts
    tm = x.norm_tokens
    router_f = gemm_kernel_s(profile, tm, e, d)
    router_b = gemm_kernel_s(profile, tm, d, e) + gemm_kernel_s(profile, d, e, tm)
    capacity_ops = 3 if model.moe_capacity_factor is not None else 0
    # top-k and softmaxes over T x E, token gather, weighted product, zeros, index_add
    forward = (3 * tm * e + 2 * rows * d + 3 * rows * d + tm * d + 3 * rows * d) * FP32
    # top-k and softmax gradients, token-gather scatter, product, index_add, split
    backward = 2 * tm * e + tm * d + 2 * rows * d + 6 * rows * d + 2 * rows * d + 2 * rows * d
    router_acc = x.accumulate * 3 * e * d * FP32
    return ModuleOps(
        forward=HostOps(
            routing_ops=28 + capacity_ops, views=12, allocs=12, kernel_s=router_f, bytes=forward
        ),
        backward=HostOps(
            ops=28, kernels=2, allocs=10, kernel_s=router_b, bytes=backward * FP32 + router_acc
        ),
    )


def _experts(
    model: ModelSpec, profile: HardwareProfile, x: RankShape, local: int, rows: float
) -> ModuleOps:
    """The local experts over ``rows`` routed rows, split evenly (module doc)."""
    d, f = model.hidden_size, model.expert_ffn_hidden_size
    gated = model.activation == "swiglu"
    matrices = 3 if gated else 2
    per = rows / local
    fwd_k = (matrices - 1) * gemm_kernel_s(profile, per, f, d) + gemm_kernel_s(profile, per, d, f)
    bwd_k = (matrices - 1) * (gemm_kernel_s(profile, per, d, f) + gemm_kernel_s(profile, d, f, per))
    bwd_k += gemm_kernel_s(profile, per, f, d) + gemm_kernel_s(profile, f, d, per)
    stacked = local * f * d  # one stacked weight
    act_f = (2 + (3 if gated else 0)) * per * f
    act_b = (3 + (6 if gated else 0)) * per * f
    one = ModuleOps(
        forward=HostOps(
            ops=matrices + 1 + gated,
            views=matrices,
            allocs=1 + gated,
            kernel_s=fwd_k,
            bytes=act_f * FP32,
            activation_kernels=1,
            activation_elements=per * f,
        ),
        backward=HostOps(
            ops=2 * matrices + 1 + gated,
            kernels=matrices + gated,
            allocs=matrices + 1 + 2 * gated,
            kernel_s=bwd_k,
            bytes=act_b * FP32,
            activation_kernels=1,
            activation_elements=per * f,
        ),
    )
    unbind = ModuleOps(
        forward=HostOps(ops=matrices, views=matrices * local),
        backward=HostOps(
            ops=matrices, allocs=matrices, transposed_bytes=matrices * 2 * stacked * FP32
        ),
    )
    acc = x.accumulate * 3 * matrices * stacked * FP32
    return one.scaled(local).plus(unbind).plus(ModuleOps(backward=HostOps(ops=matrices, bytes=acc)))


def _expert_parallel(model: ModelSpec, plan: ParallelPlan, rows: float) -> ModuleOps:
    """Count exchange, token all-to-alls and regrouping under ep > 1 (module doc)."""
    if plan.ep == 1:
        return ModuleOps()
    d = model.hidden_size
    tokens = rows * d * FP32
    return ModuleOps(
        forward=HostOps(routing_ops=17, views=4, allocs=6, bytes=4 * rows * d * FP32),
        backward=HostOps(ops=6, allocs=4, bytes=6 * rows * d * FP32),
        forward_comms=(
            Comm(
                lane="ep",
                op="all_to_all",
                size_bytes=model.num_experts * INT64,
                functional=False,
                exchange=True,
            ),
            Comm(
                lane="ep", op="all_to_all", size_bytes=tokens, count=2, autograd=True, exchange=True
            ),
        ),
        backward_comms=(
            Comm(
                lane="ep", op="all_to_all", size_bytes=tokens, count=2, autograd=True, exchange=True
            ),
        ),
    )


def moe_block(
    model: ModelSpec,
    profile: HardwareProfile,
    plan: ParallelPlan,
    x: RankShape,
    shared_expert: Sequence[ModuleOps],
) -> ModuleOps:
    """The MoE layer on its normalized input, without the residual add (counted by the
    caller); ``shared_expert`` holds the shared expert's modules (its input gather and MLP,
    `costmodel.runtimes.torch.layers`), empty without one."""
    rows = model.moe_top_k * x.norm_tokens * min(model.moe_capacity_factor or 1.0, 1.0)
    local = max(model.num_experts // plan.ep, 1)
    parts = [
        _routing(model, profile, x, rows),
        _experts(model, profile, x, local, rows),
        _expert_parallel(model, plan, rows),
        gradient_sum(x.norm_tokens, model.hidden_size, 3 if model.moe_shared_expert_size else 2),
    ]
    parts += shared_expert
    if plan.tp * plan.cp > 1:
        parts.append(
            ModuleOps(
                forward_comms=(
                    Comm(
                        lane="ep",
                        op="all_reduce",
                        size_bytes=model.num_experts * INT64,
                        functional=False,
                    ),
                )
            )
        )
    total = ModuleOps()
    for part in parts:
        total = total.plus(part)
    return total
