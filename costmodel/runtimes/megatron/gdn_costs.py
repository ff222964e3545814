"""Per-microbatch costs of one gated DeltaNet layer (hybrid symbol ``G``) on one rank
(`gdn_block`): its fused pre-norm and residual, the input and output projections with
their TP communication and FP8 quantization, the causal conv1d, the preparation of the
kernel inputs (q/k L2 norm, head repeat, decay and write-strength gates), the chunked gated
delta rule, the gated RMSNorm and the layout copy before the output projection.

Sources: Megatron-core d98e8a64 ``megatron/core/ssm/gated_delta_net/gdn.py``
(`GatedDeltaNet.forward`, `GatedDeltaNet._setup_variant_attrs`: chunk size 64) and
``common.py`` (`_GDNBase.__init__`: ``in_proj`` a column-parallel
``TELayerNormColumnParallelLinear`` h -> 2·K + 2·V + 2·Hv, ``out_proj`` a row-parallel
``TERowParallelLinear`` V -> h, both without bias; `_prepare_input_for_gated_delta_rule`,
`_apply_gated_norm`), and flash-linear-attention's kernels (fla-org/flash-linear-attention
bc3b101d ``fla/ops/gated_delta_rule/chunk.py``: ``chunk_gated_delta_rule_fwd`` and ``_bwd``,
built on ``fla/ops/gated_delta_rule/chunk_fwd.py`` (the fused K·Kᵀ and blockwise inverse at
chunk 64), ``fla/ops/gated_delta_rule/wy_fast.py``, ``fla/ops/common/chunk_delta_h.py`` and
``fla/ops/common/chunk_o.py``; the algorithm: Yang, Kautz & Hatamizadeh 2024, "Gated Delta
Networks", arXiv 2412.06464, §3.3, the WY representation of chunked delta-rule updates).

Per rank with TP degree t: Hk/t key heads of dk channels, Hv/t value heads of dv channels
(`costmodel.gdn_activations.gdn_widths`), T = b·s tokens in b·⌈s/C⌉ chunks of
C = `costmodel.gdn_activations.GDN_CHUNK_TOKENS` (64) tokens per value head. The
projections run in the job's GEMM dtype (`gemm3`) with the same TP pair and FP8
quantization as the Mamba-2 mixer's (`costmodel.runtimes.megatron.linear_pairs`). The
delta rule's matmuls are Triton ``tl.dot`` tiles in the activation dtype, priced as
batched GEMMs per (chunk, value head) (`delta_rule_gemms`,
`costmodel.compute.batched_gemm_time_s`, whose roofline takes the larger of the FLOPs at
the profile's GEMM rate and the operands' bytes at its bandwidth) plus the traffic of the
per-chunk states (`delta_rule_state_s`); everything else is memory-bound
(`costmodel.compute.memory_bound_time_s`). Of Megatron's selective recompute modules only
``gdn_norm_out`` covers part of the layer, the gated norm and what follows it up to
``out_proj`` (`gdn_norm_out_rerun`); full recompute reruns ``forward``.

Context parallelism (cp > 1; ``common.py`` ``a2a_cp_to_hp`` and ``a2a_hp_to_cp``, with
``tensor_a2a_cp2hp`` and ``tensor_a2a_hp2cp`` of
``megatron/core/ssm/mamba_context_parallel.py``): the input projection runs on the rank's
T = b·s/cp tokens; its whole output (q, k, v, z, beta, alpha) is permuted by head
(``index_select``) and sent through one all-to-all from [s/cp, b, w] to [s, b, w/cp],
which also undoes the attention load balancing; the conv1d, the kernel inputs, the delta
rule and the gated norm run over the whole sequence on Hk/(tp·cp) and Hv/(tp·cp) heads
(`mamba_cp.scan_shape`, `gdn_widths` with cp); one all-to-all brings the norm output back
to the sequence split, redoing the load balancing, before ``out_proj``. The backward sends
the gradients of the same two tensors. Each exchange sits between the kernels that need
its result, so it is exposed in full (`gdn_cp_pair`); the copies around them are
memory-bound (`gdn_cp_layout_s`).
"""

from __future__ import annotations

import math
from typing import Literal

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.compute import FP32_BYTES
from costmodel.execution import ExecutionOptions
from costmodel.gdn_activations import GDN_CHUNK_TOKENS, GdnWidths, gdn_widths
from costmodel.passes import CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3, norm_and_residual
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.runtimes.megatron.mamba_costs import BatchedGemm, ssd_dtype
from costmodel.runtimes.megatron.mamba_cp import scan_shape
from costmodel.runtimes.megatron.pair_quantization import fp8_amax_pair, fp8_pair_s
from costmodel.runtimes.megatron.userbuffers import Shape
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def gdn_projection_shapes(model: ModelSpec, x: LayerShape) -> tuple[Shape, Shape]:
    """(in_proj, out_proj) GEMM shapes (m, n, k) on one rank: T x h @ h x (2·K + 2·V +
    2·Hv)/t, and T x V/t @ V/t x h."""
    w = gdn_widths(model, x.tp)
    h = model.hidden_size
    return (x.tokens, w.in_proj, h), (x.tokens, h, w.value)


def delta_chunks(x: LayerShape) -> tuple[int, int]:
    """(chunks on the rank, chunk length): b·⌈s/C⌉ chunks of C = `GDN_CHUNK_TOKENS` tokens
    (a last, partial chunk priced whole; a sequence shorter than C is one chunk)."""
    seq = max(round(x.tokens / x.micro_batch), 1)
    c = min(GDN_CHUNK_TOKENS, seq)
    return x.micro_batch * math.ceil(seq / c), c


SOLVE_SUBCHUNKS = 4
"""Sub-chunks of a chunk in the fused forward's blockwise inverse (FLA
``fla/ops/gated_delta_rule/chunk_fwd.py`` `chunk_gated_delta_rule_fwd_intra`: ``BC = 16``
at ``BT = 64``, four diagonal blocks)."""

TF32_RATE_RATIO = 2
"""BF16 over TF32 dense tensor-core rate, the same on every device of
``reference/hardware.md`` §1a (H100 SXM 989 / 494.7 TFLOP/s, B200 2250 / 1125)."""


def delta_rule_forward_gemms(heads: int, c: int, dk: int, dv: int) -> dict[str, BatchedGemm]:
    """The ``tl.dot`` products of FLA's forward (`chunk_gated_delta_rule_fwd`) over ``heads``
    (chunk, value head) pairs with chunk length c and sub-chunk length c/4.

    - `chunk_gated_delta_rule_fwd_kkt_solve_kernel` (``chunk_fwd.py``): ``kkt`` the ten
      lower-triangular sub-blocks of K·Kᵀ (c/4 x dk · dk x c/4 each); ``solve_tril`` the
      block merge of the inverse, sixteen c/4-cube products (two each for the three
      first sub-diagonal blocks, three each for the two second, four for the corner), TF32
      (`delta_rule_gemms_s`); the forward substitution on the diagonal blocks is
      element-wise work in registers, not priced.
    - `recompute_w_u_fwd_kernel` (``wy_fast.py``): ``u`` A·(β·V), ``w`` A·(β·K·exp g).
    - `chunk_gated_delta_rule_fwd_kernel_h_blockdim64` (``fla/ops/common/chunk_delta_h.py``):
      ``v_new`` W·S, ``states`` Kᵀ·V_new.
    - `chunk_fwd_kernel_o` (``fla/ops/common/chunk_o.py``, one V block at BV = dv):
      ``o_states`` Q·S, ``o_scores`` Q·Kᵀ, ``o_intra`` (masked scores)·V_new."""
    sub = max(c // SOLVE_SUBCHUNKS, 1)
    return {
        "kkt": BatchedGemm(10 * heads, sub, sub, dk),
        "solve_tril": BatchedGemm(16 * heads, sub, sub, sub),
        **delta_rule_recomputed_gemms(heads, c, dk, dv),
        "o_states": BatchedGemm(heads, c, dv, dk),
        "o_scores": BatchedGemm(heads, c, c, dk),
        "o_intra": BatchedGemm(heads, c, dv, c),
    }


def delta_rule_recomputed_gemms(heads: int, c: int, dk: int, dv: int) -> dict[str, BatchedGemm]:
    """The products the forward runs and the backward reruns (`chunk_gated_delta_rule_bwd`
    calls `recompute_w_u_fwd` and `chunk_gated_delta_rule_fwd_h` again): ``w``, ``u``,
    ``v_new`` and ``states`` (`delta_rule_forward_gemms`)."""
    return {
        "w": BatchedGemm(heads, c, dk, c),
        "u": BatchedGemm(heads, c, dv, c),
        "v_new": BatchedGemm(heads, c, dv, dk),
        "states": BatchedGemm(heads, dk, dv, c),
    }


def delta_rule_backward_gemms(heads: int, c: int, dk: int, dv: int) -> dict[str, BatchedGemm]:
    """The ``tl.dot`` products of FLA's backward (`chunk_gated_delta_rule_bwd`), 24 per
    (chunk, value head) at dk, dv <= 128 (one K and one V block on Hopper and later):

    - the four of `delta_rule_recomputed_gemms`;
    - `chunk_bwd_kernel_dv_local` (``chunk_o.py``): ``dv_scores`` K·Qᵀ, ``dv_local``
      (masked)ᵀ·dO;
    - `chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64` (``chunk_delta_h.py``):
      ``dv_states`` K·dS, ``dh_q`` Qᵀ·dO, ``dh_w`` Wᵀ·dV;
    - `chunk_bwd_kernel_dqkwg` (``chunk_o.py``): ``d_scores`` dO·V_newᵀ, ``dq_states``
      dO·Sᵀ, ``dk_states`` V_new·dSᵀ, ``dw`` dV·Sᵀ, ``dq_intra`` dScores·K, ``dk_intra``
      dScoresᵀ·Q;
    - `prepare_wy_repr_bwd_kernel` (``wy_fast.py``): ``dA_w`` dW·(β·K·exp g)ᵀ, ``dk_wy``
      A·dW, ``dA_u`` dU·(β·V)ᵀ, ``dv_wy`` A·dU, ``dA_inverse`` dA·A and A·dA, ``kkt_wy``
      K·Kᵀ rebuilt whole, ``dk_kkt`` dA·K and (β·K)ᵀ·dA."""
    return {
        **delta_rule_recomputed_gemms(heads, c, dk, dv),
        "dv_scores": BatchedGemm(heads, c, c, dk),
        "dv_local": BatchedGemm(heads, c, dv, c),
        "dv_states": BatchedGemm(heads, c, dv, dk),
        "dh_q": BatchedGemm(heads, dk, dv, c),
        "dh_w": BatchedGemm(heads, dk, dv, c),
        "d_scores": BatchedGemm(heads, c, c, dv),
        "dq_states": BatchedGemm(heads, c, dk, dv),
        "dk_states": BatchedGemm(heads, c, dk, dv),
        "dw": BatchedGemm(heads, c, dk, dv),
        "dq_intra": BatchedGemm(heads, c, dk, c),
        "dk_intra": BatchedGemm(heads, c, dk, c),
        "dA_w": BatchedGemm(heads, c, c, dk),
        "dk_wy": BatchedGemm(heads, c, dk, c),
        "dA_u": BatchedGemm(heads, c, c, dv),
        "dv_wy": BatchedGemm(heads, c, dv, c),
        "dA_inverse": BatchedGemm(2 * heads, c, c, c),
        "kkt_wy": BatchedGemm(heads, c, c, dk),
        "dk_kkt": BatchedGemm(2 * heads, c, dk, c),
    }


def delta_rule_gemms(
    model: ModelSpec, x: LayerShape, direction: Literal["forward", "backward"]
) -> dict[str, BatchedGemm]:
    """The matmuls of the chunked gated delta rule on one rank by name, one batched GEMM
    per (chunk, value head) (`delta_rule_forward_gemms`, `delta_rule_backward_gemms`).
    Megatron calls ``chunk_gated_delta_rule`` with q and k repeated to the Hv value heads
    (`_prepare_input_for_gated_delta_rule`), so every product runs per value head. ``x``
    is the layer's shape; under context parallelism the rule runs over the whole sequence
    at Hv/(tp·cp) heads."""
    w = gdn_widths(model, x.tp, x.cp)
    chunks, c = delta_chunks(scan_shape(x))
    heads = chunks * max(round(w.value_heads), 1)
    dims = (heads, c, w.key_head_dim, w.value_head_dim)
    if direction == "forward":
        return delta_rule_forward_gemms(*dims)
    return delta_rule_backward_gemms(*dims)


def delta_rule_gemms_s(
    profile: HardwareProfile, gemms: dict[str, BatchedGemm], dtype: str
) -> float:
    """Seconds of the `delta_rule_gemms` of one direction, each a batched GEMM
    (`costmodel.compute.batched_gemm_time_s`). ``solve_tril``'s merge dots run inside the
    kernel of ``kkt`` (`chunk_gated_delta_rule_fwd_kkt_solve_kernel`) as TF32 dots on fp32
    tiles held in registers: they add their FLOPs, weighted by `TF32_RATE_RATIO`, to that
    kernel at its rate, and no launch of their own."""
    seconds = 0.0
    for name, g in gemms.items():
        if name == "solve_tril":
            continue
        one = ops.batched_gemm_time_s(profile, g.batch, g.m, g.n, g.k, dtype)
        if name == "kkt" and "solve_tril" in gemms:
            one *= 1.0 + TF32_RATE_RATIO * gemms["solve_tril"].flops / g.flops
        seconds += one
    return seconds


def delta_rule_state_s(
    profile: HardwareProfile, x: LayerShape, w: GdnWidths
) -> tuple[float, float]:
    """(forward, backward) seconds of the per-chunk state traffic and the decay cumsum.

    The recurrence writes every chunk's dk x dv state per value head in the activation
    dtype (``chunk_gated_delta_rule_fwd_h`` ``h``; S = chunks·(Hv/t)·dk·dv elements), which
    ``chunk_fwd_o`` reads back; backward rewrites and rereads it and writes and reads its
    gradient ``dh`` (4 passes). The chunk-local cumsum of the fp32 decay g
    (``chunk_local_cumsum``) reads and writes 4 bytes per token and value head each way."""
    e = x.elem
    chunks, _ = delta_chunks(x)
    states = chunks * w.value_heads * w.key_head_dim * w.value_head_dim
    cumsum = ops.memory_bound_time_s(profile, 2 * FP32_BYTES * x.tokens * w.value_heads)
    forward = ops.memory_bound_time_s(profile, 2 * e * states) + cumsum
    backward = ops.memory_bound_time_s(profile, 4 * e * states, num_ops=2) + cumsum
    return forward, backward


def delta_rule_s(model: ModelSpec, profile: HardwareProfile, x: LayerShape) -> tuple[float, float]:
    """(forward, backward) seconds of the chunked gated delta rule on one rank: its batched
    GEMMs (`delta_rule_gemms` in the activation dtype, `mamba_costs.ssd_dtype`) and its
    state traffic (`delta_rule_state_s`, on `mamba_cp.scan_shape` and the cp widths under
    context parallelism)."""
    dtype = ssd_dtype(x)
    scan = gdn_widths(model, x.tp, x.cp)
    state_fwd, state_bwd = delta_rule_state_s(profile, scan_shape(x), scan)
    times = []
    for direction in ("forward", "backward"):
        gemms = delta_rule_gemms(model, x, direction)
        times.append(delta_rule_gemms_s(profile, gemms, dtype))
    return times[0] + state_fwd, times[1] + state_bwd


def gdn_elementwise_s(profile: HardwareProfile, x: LayerShape, w: GdnWidths) -> tuple[float, float]:
    """(forward, backward) seconds of the net's memory-bound work around the delta rule,
    ``e`` the activation element size, per token on the rank:

    - Causal depthwise conv1d with SiLU over (2·K + V)/t channels (FLA ``causal_conv1d``):
      forward reads and writes them (2·e); backward recomputes the activation and reads
      the input and the gradient, writes the input gradient (5·e in two kernels).
    - Kernel inputs (`_prepare_input_for_gated_delta_rule`, one fused region forward, its
      gradient backward): the q/k L2 norm reads and writes 2·K/t, the head repeat writes
      q and k at Hv/t heads (2·Hv·dk/t), v's contiguous copy reads and writes V/t, the
      gates read alpha and beta and write g in fp32 and beta (2·Hv/t·e + Hv/t·(4 + e));
      backward moves twice those bytes.
    - The gated RMSNorm and its layout copy (`gated_norm_s`).
    """
    e, n = x.elem, x.tokens
    conv = e * n * w.conv_channels
    forward = ops.memory_bound_time_s(profile, 2 * conv)
    backward = ops.memory_bound_time_s(profile, 5 * conv, num_ops=2)
    heads = w.value_heads
    prep = e * n * (4 * w.key + 2 * heads * w.key_head_dim + 2 * w.value + 3 * heads)
    prep += FP32_BYTES * n * heads
    forward += ops.memory_bound_time_s(profile, prep)
    backward += ops.memory_bound_time_s(profile, 2 * prep)
    norm_fwd, norm_bwd = gated_norm_s(profile, x, w)
    return forward + norm_fwd, backward + norm_bwd


def gated_norm_s(profile: HardwareProfile, x: LayerShape, w: GdnWidths) -> tuple[float, float]:
    """(forward, backward) seconds of the gated RMSNorm and the copy after it, per token on
    the rank (``e`` the activation element size):

    - `_apply_gated_norm` (``out_norm`` over each head's dv channels, times SiLU of z):
      forward reads the rule output and z and writes the product (3·e·V/t); backward reads
      the gradient, the input and z and writes two gradients (5·e·V/t).
    - The ``transpose(0, 1).contiguous()`` copy of the norm output to [s, b, ·] before
      ``out_proj`` (`_gated_norm_and_a2a`), and of its gradient (2·e·V/t each way).
    """
    e, n = x.elem, x.tokens
    copy = ops.memory_bound_time_s(profile, 2 * e * n * w.value)
    forward = ops.memory_bound_time_s(profile, 3 * e * n * w.value) + copy
    backward = ops.memory_bound_time_s(profile, 5 * e * n * w.value) + copy
    return forward, backward


def gdn_cp_bytes(model: ModelSpec, x: LayerShape) -> tuple[float, float]:
    """Bytes per rank of the two all-to-alls of one gated DeltaNet's forward (nccl-tests
    size: the tensor a rank holds before the exchange): the in_proj output,
    e·T·(2·K + 2·V + 2·Hv)/tp, and the gated norm output, e·T·V/tp, T = b·s/cp; (0, 0) at
    cp = 1. The backward sends their gradients, the same sizes (module docstring)."""
    if x.cp == 1:
        return 0.0, 0.0
    w = gdn_widths(model, x.tp)
    return x.elem * x.tokens * w.in_proj, x.elem * x.tokens * w.value


def gdn_cp_pair(
    model: ModelSpec, profile: HardwareProfile, x: LayerShape, group: GroupPlacement
) -> tuple[PassCost, PassCost]:
    """(forward, backward) context-parallel exchanges of one gated DeltaNet: the two
    all-to-alls of `gdn_cp_bytes` over the cp group each way, all of it exposed (module
    docstring)."""
    sizes = gdn_cp_bytes(model, x)
    total_s = sum(collective_time_s(profile, "all_to_all", b, group) for b in sizes)
    one = PassCost(cp_s=total_s, cp_exposed_s=total_s, cp_bytes=sum(sizes))
    return one, one


def gdn_cp_layout_s(
    model: ModelSpec, profile: HardwareProfile, x: LayerShape
) -> tuple[float, float]:
    """(forward, backward) seconds of the copies context parallelism adds to one gated
    DeltaNet; (0, 0) at cp = 1. Each reads and writes its tensor: before the net, the head
    permutation (``index_select``), ``all_to_all_sp2hp``'s split-and-concatenate and
    `_undo_attention_load_balancing` of the in_proj output (3 copies); after it, the two of
    `gdn_cp_output_copies_s`. The backward runs each copy's autograd mirror, the same
    bytes."""
    if x.cp == 1:
        return 0.0, 0.0
    w = gdn_widths(model, x.tp)
    seconds = ops.memory_bound_time_s(profile, 3 * 2 * x.elem * x.tokens * w.in_proj, num_ops=3)
    seconds += gdn_cp_output_copies_s(model, profile, x)
    return seconds, seconds


def gdn_cp_output_copies_s(model: ModelSpec, profile: HardwareProfile, x: LayerShape) -> float:
    """Seconds of the copies after the net under context parallelism,
    `_redo_attention_load_balancing` and ``all_to_all_hp2sp``'s concatenate of the norm
    output (2 copies, each reading and writing e·T·V/tp); 0 at cp = 1."""
    if x.cp == 1:
        return 0.0
    w = gdn_widths(model, x.tp)
    return ops.memory_bound_time_s(profile, 2 * 2 * x.elem * x.tokens * w.value, num_ops=2)


def gdn_norm_out_rerun(
    model: ModelSpec, profile: HardwareProfile, x: LayerShape, group: GroupPlacement
) -> PassCost:
    """What recompute module ``gdn_norm_out`` reruns in backward: `_gated_norm_and_a2a`
    (``gdn.py`` `GatedDeltaNet.forward`, a ``CheckpointWithoutOutput``), the gated norm and
    its copy (`gated_norm_s` forward) and, under context parallelism, the all-to-all back
    to the sequence split (`gdn_cp_bytes`' second size, exposed) and its copies
    (`gdn_cp_output_copies_s`)."""
    norm_s, _ = gated_norm_s(profile, scan_shape(x), gdn_widths(model, x.tp, x.cp))
    rerun = PassCost(compute_s=norm_s + gdn_cp_output_copies_s(model, profile, x))
    if x.cp == 1:
        return rerun
    size = gdn_cp_bytes(model, x)[1]
    a2a_s = collective_time_s(profile, "all_to_all", size, group)
    return rerun.plus(PassCost(cp_s=a2a_s, cp_exposed_s=a2a_s, cp_bytes=size))


def gdn_block(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    options: ExecutionOptions,
) -> tuple[PassCost, PassCost, dict[str, PassCost], float, float]:
    """One gated DeltaNet layer (pre-norm, net, residual): (forward, backward, rerun by
    recompute module, dgrad_s, wgrad_s), the contract of
    `costmodel.runtimes.megatron.attention_costs.attention_block`.

    dgrad holds the projections' input-gradient GEMMs and every backward kernel of the
    delta rule, conv1d, norms and quantization (the conv, A_log, dt_bias and norm weight
    gradients are reduced inside those kernels); wgrad the projections' weight-gradient
    GEMMs. LoRA is refused for these layers (`specs.rules_lora.lora_not_on_gdn`). The
    rerun dict holds ``gdn_norm_out`` (`gdn_norm_out_rerun`). Under context parallelism
    the all-to-alls are exposed CP time (`gdn_cp_pair`) and their copies forward and dgrad
    compute (`gdn_cp_layout_s`)."""
    h = model.hidden_size
    w = gdn_widths(model, x.tp)
    in_shape, out_shape = gdn_projection_shapes(model, x)
    in_proj, out_proj = gemm3(profile, x, *in_shape), gemm3(profile, x, *out_shape)
    rule_fwd, rule_bwd = delta_rule_s(model, profile, x)
    ew_fwd, ew_bwd = norm_and_residual(profile, x, h, options)
    mix_fwd, mix_bwd = gdn_elementwise_s(profile, scan_shape(x), gdn_widths(model, x.tp, x.cp))
    copy_fwd, copy_bwd = gdn_cp_layout_s(model, profile, x)
    mix_fwd, mix_bwd = mix_fwd + copy_fwd, mix_bwd + copy_bwd
    fp8_fwd, fp8_bwd = fp8_pair_s(
        profile,
        x,
        h,
        w.in_proj,
        w.value,
        options.fp8_recipe,
        options.cudnn_norm,
        fused_rht=options.nvfp4_fused_rht_cast,
        tn_gemm_only=options.fp8_tn_gemm_only is not False,
        userbuffers=plan.tp_comm_overlap,
    )
    ew_fwd += mix_fwd + fp8_fwd
    ew_bwd += mix_bwd + fp8_bwd
    tp_f, tp_b = tp_pair(profile, plan, x, h, groups, in_shape, out_shape, options, frozen=False)
    amax_f, amax_b = fp8_amax_pair(profile, x, groups, options.fp8_recipe, w.value)
    dgrad = in_proj[1] + out_proj[1] + rule_bwd + ew_bwd
    wgrad = in_proj[2] + out_proj[2]
    forward = PassCost(compute_s=in_proj[0] + out_proj[0] + rule_fwd + ew_fwd)
    backward = PassCost(compute_s=dgrad + wgrad)
    forward, backward = forward.plus(tp_f).plus(amax_f), backward.plus(tp_b).plus(amax_b)
    if x.cp > 1:
        cp_f, cp_b = gdn_cp_pair(model, profile, x, groups.cp)
        forward, backward = forward.plus(cp_f), backward.plus(cp_b)
    rerun = {"gdn_norm_out": gdn_norm_out_rerun(model, profile, x, groups.cp)}
    return forward, backward, rerun, dgrad, wgrad
