"""Per-microbatch costs of one Mamba-2 layer of a hybrid model on one rank (`mamba_block`):
its fused pre-norm and residual, the input and output projections with their TP
communication and FP8 quantization, the causal conv1d, the SSD chunked scan, the gate,
D skip and grouped RMSNorm, and the layout copies around the scan.

Sources: Megatron-core ``megatron/core/ssm/mamba_layer.py`` (`MambaLayer.forward`: norm,
mixer, bias-dropout-add), ``megatron/core/ssm/mamba_mixer.py`` (`MambaMixer.forward` and
`MambaMixer._ssm_training`, the training path, ``use_mamba_mem_eff_path`` True by
default) and state-spaces/mamba ``mamba_ssm/ops/triton/ssd_combined.py``
(`MambaSplitConv1dScanCombinedFn`, `_mamba_chunk_scan_combined_fwd`,
`_mamba_chunk_scan_combined_bwd`) with the kernels of ``ssd_chunk_state.py``,
``ssd_bmm.py``, ``ssd_chunk_scan.py`` and ``ssd_state_passing.py``; the block
decomposition is state-space duality (Dao & Gu 2024, arXiv 2405.21060, §6).

Per rank with TP degree t: H/t heads of P channels, G/t groups, N state size, d_inner/t
inner width (`costmodel.mamba_activations.mamba_widths`), T = b·s tokens in b·⌈s/Q⌉
chunks of Q = `SSD_CHUNK_TOKENS` tokens. The in_proj (column-parallel, h -> (2·d_inner +
2·G·N + H)/t) and out_proj (row-parallel, d_inner/t -> h) GEMMs run in the job's GEMM
dtype (`gemm3`) with the same TP pair and FP8 quantization as the QKV and output
projections (`costmodel.runtimes.megatron.linear_pairs`); Megatron builds them without
biases (``assert not bias``). The scan's matmuls are Triton ``tl.dot`` tiles in the
activation dtype (bf16; fp32 in fp32 jobs), priced as batched GEMMs (`ssd_gemms`); its
element-wise kernels, the conv1d and the norms are memory-bound
(`costmodel.compute.memory_bound_time_s`). With context parallelism (cp > 1,
`costmodel.runtimes.megatron.mamba_cp`) the projections, the grouped RMSNorm and the
pre-norm run on the rank's T = b·s/cp tokens at the widths above; the conv1d, the scan, the
gate and the layout copies around the scan run on the whole sequence at H/(tp·cp) heads
(`mamba_cp.scan_shape`, `mamba_widths` with cp), between exposed all-to-alls over the cp
group. Megatron's selective recompute modules do not cover the mixer, so the rerun dict
is empty; full recompute reruns ``forward``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from costmodel import compute as ops
from costmodel.compute import FP32_BYTES
from costmodel.execution import ExecutionOptions
from costmodel.mamba_activations import MambaWidths, mamba_widths
from costmodel.passes import CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3, norm_and_residual
from costmodel.runtimes.megatron.linear_pairs import tp_pair
from costmodel.runtimes.megatron.mamba_cp import cp_layout_s, mamba_cp_pair, scan_shape
from costmodel.runtimes.megatron.pair_quantization import fp8_amax_pair, fp8_pair_s
from costmodel.runtimes.megatron.userbuffers import Shape
from profiles.schema import HardwareProfile
from specs.finetune import has_adapter
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

SSD_CHUNK_TOKENS = 128
"""Chunk length Q of the SSD scan: `MambaMixer` ``chunk_size`` (default 128, which
Megatron's layer specs keep)."""


@dataclass(frozen=True, slots=True)
class BatchedGemm:
    """``batch`` independent (m x k) @ (k x n) products of one SSD kernel."""

    batch: int
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        """2·batch·m·n·k."""
        return 2.0 * self.batch * self.m * self.n * self.k


def projection_shapes(model: ModelSpec, x: LayerShape) -> tuple[Shape, Shape]:
    """(in_proj, out_proj) GEMM shapes (m, n, k) on one rank: T x h @ h x (2·d_inner +
    2·G·N + H)/t, and T x d_inner/t @ d_inner/t x h (`MambaMixer.__init__`, ``in_proj``
    and ``out_proj``)."""
    w = mamba_widths(model, x.tp)
    h = model.hidden_size
    return (x.tokens, w.in_proj, h), (x.tokens, h, w.inner)


def ssd_chunks(x: LayerShape) -> tuple[int, int]:
    """(chunks on the rank, chunk length): b·⌈s/Q⌉ chunks of Q = `SSD_CHUNK_TOKENS` tokens
    (a last, partial chunk priced whole; a sequence shorter than Q is one chunk of its
    length). ``x`` is the scan's shape (`mamba_cp.scan_shape`): the whole sequence under
    context parallelism."""
    seq = max(round(x.tokens / x.micro_batch), 1)
    q = min(SSD_CHUNK_TOKENS, seq)
    return x.micro_batch * math.ceil(seq / q), q


def ssd_gemms(
    model: ModelSpec, x: LayerShape, direction: Literal["forward", "backward"]
) -> dict[str, BatchedGemm]:
    """The matmuls of the SSD scan on one rank, one batched GEMM per (chunk, head) or
    (chunk, group), by name; each kernel's ``tl.dot`` in mamba_ssm's Triton files.

    Forward (`_mamba_chunk_scan_combined_fwd`; SSD §6 block decomposition):
    ``chunk_state`` the chunk states Bᵀ·X, xᵀ (P x Q) · decayed B (Q x N)
    (`_chunk_state_fwd`); ``chunk_cb`` C·Bᵀ per group, Q x N · N x Q (`_bmm_chunk_fwd`);
    ``scan_states`` the output from the passed states, C (Q x N) · state (N x P) and
    ``scan_intra`` the intra-chunk output, decay-masked CB (Q x Q) · X (Q x P), both in
    `_chunk_scan_fwd` (its causal loop stops at the diagonal tile, 3/4 to all of the Q x Q
    square for 64- to 128-row tiles: priced over the whole square). The state passing
    between chunks is element-wise (`ssd_elementwise_s`).

    Backward (`_mamba_chunk_scan_combined_bwd`) recomputes ``chunk_state`` and
    ``chunk_cb``, then: ``dstates`` doutᵀ·C (`_chunk_scan_bwd_dstates`); ``dx_states``
    B·dstatesᵀ and ``dx_intra`` (CB masked)ᵀ·dout (`_chunk_scan_chunk_state_bwd_dx`);
    ``db_states`` X·dstates (`_chunk_state_bwd_db`); ``dc_states`` dout·states
    (`_chunk_scan_bwd_dC`); ``dcb`` dout·Xᵀ (`_chunk_scan_bwd_dcb`); ``db_intra`` and
    ``dc_intra`` dCB·C and dCBᵀ·B per group (`_bmm_chunk_bwd`); ``dda_intra`` dout·Xᵀ again
    for the decay gradient (`_chunk_scan_bwd_ddAcs_stable`). The kernels' grids run one
    program per head, so a head's product takes its group's B, C or CB as its own operand:
    the memory side of `costmodel.compute.batched_gemm_time_s` counts those once per head,
    an upper bound where the L2 cache serves a group's heads.

    ``x`` is the layer's shape; under context parallelism the scan runs over the whole
    sequence on H/(tp·cp) heads and max(G/tp, cp)/cp groups (`mamba_cp.scan_shape`,
    `mamba_widths` with cp)."""
    w = mamba_widths(model, x.tp, x.cp)
    chunks, q = ssd_chunks(scan_shape(x))
    heads = chunks * max(round(w.heads), 1)
    groups = chunks * max(round(w.groups), 1)
    p, n = w.head_dim, w.state_dim
    recomputed = {
        "chunk_state": BatchedGemm(heads, p, n, q),
        "chunk_cb": BatchedGemm(groups, q, q, n),
    }
    if direction == "forward":
        return {
            **recomputed,
            "scan_states": BatchedGemm(heads, q, p, n),
            "scan_intra": BatchedGemm(heads, q, p, q),
        }
    return {
        **recomputed,
        "dstates": BatchedGemm(heads, p, n, q),
        "dx_states": BatchedGemm(heads, q, p, n),
        "dx_intra": BatchedGemm(heads, q, p, q),
        "db_states": BatchedGemm(heads, q, n, p),
        "dc_states": BatchedGemm(heads, q, n, p),
        "dcb": BatchedGemm(heads, q, q, p),
        "db_intra": BatchedGemm(groups, q, n, q),
        "dc_intra": BatchedGemm(groups, q, n, q),
        "dda_intra": BatchedGemm(heads, q, q, p),
    }


def ssd_dtype(x: LayerShape) -> str:
    """GEMM dtype of the SSD kernels: the activation dtype (bf16, fp32 in fp32 jobs); FP8
    and NVFP4 jobs quantize only the linear layers (`costmodel.compute.activation_dtype`)."""
    return ops.gemm_dtype(ops.activation_dtype(x.precision))


def ssd_elementwise_s(
    profile: HardwareProfile, x: LayerShape, w: MambaWidths
) -> tuple[float, float]:
    """(forward, backward) seconds of the SSD scan's element-wise kernels on one rank.

    Per-head scalars over T·H/t rows: forward `_chunk_cumsum_fwd` reads dt (e) and writes
    the softplus dt and the decay cumsum in fp32 (e + 8 bytes); backward reruns it, runs
    `_chunk_cumsum_bwd` (reads the fp32 dA and dt gradients and dt, writes ddt: 8 + 2·e)
    and the reverse cumsum of ``ddA_cumsum_prev`` and two adds into ddA (``flip``,
    ``cumsum``, ``flip``, two in-place adds: 48 bytes in 5 kernels). Chunk states, S =
    chunks·(H/t)·P·N elements: forward `_state_passing_fwd` reads them in fp32 and writes
    them in the activation dtype (4 + e); backward reruns it in fp32 (8) and runs
    `_state_passing_bwd` (reads the fp32 states and state gradients, writes both in the
    activation dtype: 8 + 2·e)."""
    e = x.elem
    chunks, _ = ssd_chunks(x)
    rows = x.tokens * w.heads
    states = chunks * w.heads * w.head_dim * w.state_dim
    cumsum = ops.memory_bound_time_s(profile, (e + 2 * FP32_BYTES) * rows)
    forward = cumsum + ops.memory_bound_time_s(profile, (FP32_BYTES + e) * states)
    backward = (
        cumsum
        + ops.memory_bound_time_s(profile, (2 * FP32_BYTES + 2 * e) * rows)
        + ops.memory_bound_time_s(profile, 48 * rows, num_ops=5)
        + ops.memory_bound_time_s(profile, 2 * FP32_BYTES * states)
        + ops.memory_bound_time_s(profile, (2 * FP32_BYTES + 2 * e) * states)
    )
    return forward, backward


def ssd_scan_s(model: ModelSpec, profile: HardwareProfile, x: LayerShape) -> tuple[float, float]:
    """(forward, backward) seconds of the SSD chunked scan on one rank: its batched GEMMs
    (`ssd_gemms`, `costmodel.compute.batched_gemm_time_s` in `ssd_dtype`) and its
    element-wise kernels (`ssd_elementwise_s`, on `mamba_cp.scan_shape` and the cp widths
    under context parallelism)."""
    dtype = ssd_dtype(x)
    scan_w = mamba_widths(model, x.tp, x.cp)
    ew_fwd, ew_bwd = ssd_elementwise_s(profile, scan_shape(x), scan_w)
    times = []
    for direction in ("forward", "backward"):
        gemms = ssd_gemms(model, x, direction)
        times.append(
            sum(
                ops.batched_gemm_time_s(profile, g.batch, g.m, g.n, g.k, dtype)
                for g in gemms.values()
            )
        )
    return times[0] + ew_fwd, times[1] + ew_bwd


def mixer_elementwise_s(
    profile: HardwareProfile, x: LayerShape, w: MambaWidths, scan: MambaWidths
) -> tuple[float, float]:
    """(forward, backward) seconds of the mixer's memory-bound work around the scan, ``e``
    the activation element size: the conv1d, the gate and the layout copies on the scan's
    rows and widths (``scan``; the whole sequence at H/(tp·cp) heads under context
    parallelism, `mamba_cp.scan_shape`), the grouped RMSNorm on the rank's T rows at the
    tp widths ``w`` (Megatron applies it after `_all_to_all_hp2cp`).

    - Causal depthwise conv1d with SiLU over the (d_inner + 2·G·N)/t channels
      (``causal_conv1d_fwd_function``): forward reads and writes them (2·e); backward
      recomputes the forward (`MambaSplitConv1dScanCombinedFn.backward`), then
      ``causal_conv1d_bwd_function`` reads the input and the gradient and writes the input
      gradient (3·e): 5·e in two kernels.
    - The z gate and the D skip in the epilogue of `_chunk_scan_fwd` (``HAS_Z``): besides
      the output, it reads z and writes ``out_x`` (2·e per d_inner/t channel); backward
      `_chunk_scan_bwd_dz` reads dout, ``out_x``, z and x and writes dz and the gated dout
      (6·e).
    - The grouped RMSNorm of `MambaMixer` (``self.norm``, mamba_ssm ``RMSNormGated`` with
      group size d_inner/G, no z on this path): one norm kernel each way
      (`costmodel.compute.norm_time_s`).
    - With b > 1, the ``rearrange(...).contiguous()`` copies of `MambaMixer._ssm_training`
      between [s, b, ·] and [b, s, ·], of the in_proj output and of the scan output (read
      and write, 2·e), and of their gradients in backward; views when b = 1.
    """
    e, n, rows = x.elem, x.tokens, scan_shape(x).tokens
    conv = e * rows * scan.conv_channels
    forward = ops.memory_bound_time_s(profile, 2 * conv)
    backward = ops.memory_bound_time_s(profile, 5 * conv, num_ops=2)
    forward += ops.memory_bound_time_s(profile, 2 * e * rows * scan.inner)
    backward += ops.memory_bound_time_s(profile, 6 * e * rows * scan.inner)
    forward += ops.norm_time_s(profile, n, round(w.inner), e, "forward")
    backward += ops.norm_time_s(profile, n, round(w.inner), e, "backward")
    if x.micro_batch > 1:
        copy_bytes = 2 * e * rows * (scan.in_proj + scan.inner)
        copies = ops.memory_bound_time_s(profile, copy_bytes, num_ops=2)
        forward, backward = forward + copies, backward + copies
    return forward, backward


def mamba_block(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    groups: CommGroups,
    options: ExecutionOptions,
) -> tuple[PassCost, PassCost, dict[str, PassCost], float, float]:
    """One Mamba-2 layer (pre-norm, mixer, residual): (forward, backward, rerun by
    recompute module, dgrad_s, wgrad_s), the contract of
    `costmodel.runtimes.megatron.attention_costs.attention_block`.

    dgrad holds the projections' input-gradient GEMMs and every backward kernel of the
    scan, conv1d, norms and quantization (their small weight gradients are reduced inside
    those kernels); wgrad the projections' weight-gradient GEMMs, none for a LoRA job's
    frozen base, whose in_proj returns its norm output to an ``in_proj`` adapter as the QKV
    projection does (`pair_quantization.fp8_pair_s` ``norm_returned``); the adapters themselves:
    `costmodel.runtimes.megatron.lora_costs`. The rerun dict is empty (module docstring).
    Under context parallelism the all-to-alls are exposed CP time
    (`mamba_cp.mamba_cp_pair`) and their layout copies forward and dgrad compute
    (`mamba_cp.cp_layout_s`)."""
    frozen = job.lora is not None
    h = model.hidden_size
    w = mamba_widths(model, x.tp)
    in_shape, out_shape = projection_shapes(model, x)
    in_proj, out_proj = gemm3(profile, x, *in_shape), gemm3(profile, x, *out_shape)
    scan_fwd, scan_bwd = ssd_scan_s(model, profile, x)
    ew_fwd, ew_bwd = norm_and_residual(profile, x, h, options)
    mix_fwd, mix_bwd = mixer_elementwise_s(profile, x, w, mamba_widths(model, x.tp, x.cp))
    if x.cp > 1:
        copy_fwd, copy_bwd = cp_layout_s(model, profile, x)
        mix_fwd, mix_bwd = mix_fwd + copy_fwd, mix_bwd + copy_bwd
    fp8_fwd, fp8_bwd = fp8_pair_s(
        profile,
        x,
        h,
        w.in_proj,
        w.inner,
        options.fp8_recipe,
        options.cudnn_norm,
        frozen=frozen,
        norm_returned=has_adapter(job.lora, "in_proj"),
        fused_rht=options.nvfp4_fused_rht_cast,
        tn_gemm_only=options.fp8_tn_gemm_only is not False,
        userbuffers=plan.tp_comm_overlap,
    )
    ew_fwd += mix_fwd + fp8_fwd
    ew_bwd += mix_bwd + fp8_bwd
    tp_f, tp_b = tp_pair(
        profile,
        plan,
        x,
        h,
        groups,
        in_shape,
        out_shape,
        options,
        frozen=frozen,
        norm_returned=has_adapter(job.lora, "in_proj"),
    )
    amax_f, amax_b = fp8_amax_pair(profile, x, groups, options.fp8_recipe, w.inner)
    dgrad = in_proj[1] + out_proj[1] + scan_bwd + ew_bwd
    wgrad = 0.0 if frozen else in_proj[2] + out_proj[2]
    forward = PassCost(compute_s=in_proj[0] + out_proj[0] + scan_fwd + ew_fwd)
    backward = PassCost(compute_s=dgrad + wgrad)
    forward, backward = forward.plus(tp_f).plus(amax_f), backward.plus(tp_b).plus(amax_b)
    if x.cp > 1:
        cp_f, cp_b = mamba_cp_pair(model, profile, x, groups.cp)
        forward, backward = forward.plus(cp_f), backward.plus(cp_b)
    return forward, backward, {}, dgrad, wgrad
