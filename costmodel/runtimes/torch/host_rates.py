"""Host-side rates of a CPU profile: what one operator, autograd node, DTensor dispatch or
AdamW parameter tensor costs on the machine, for the ``torch`` runtime (`costmodel.runtimes.torch`).

On a CPU every operator is run by the calling thread, so a training step's time is the sum
of its operators' host costs. `paraplan profile` measures those costs into the profile's
host section (`profiles.schema_host.HostOverheads`: timings by probe name, streams by operator
and size, collective calls by size); this module reads them, each with a documented
fallback for a section without that probe. A profile without a host section (a GPU's) has
no host cost (`kernel_bound_rates`):

- ``dispatch_s``: `ComputeProfile.op_overhead_s`, a plain ``x + y`` on tiny tensors (what a
  metadata-only operator such as ``view`` or ``transpose`` costs at most).
- ``forward_op_s``: an operator recorded by autograd, per operator of a chain
  (timing ``autograd_forward``); fallback ``dispatch_s``.
- ``backward_node_s`` and ``backward_call_s``: the autograd engine per node and per
  ``backward()`` call (timings ``autograd_backward_node`` and
  ``..._call``); fallback: the per-operator figure of one 16-node chain
  (``autograd_backward``, the call cost spread over the nodes) and no call cost.
- token routing (the MoE layer's index and sort bookkeeping): ``routing_op_s`` per
  operator of a routing round reached cold (timing ``routing_op``,
  `profiles.profiler.routing`); fallback ``forward_op_s``.
- a sequence-parallel RMSNorm, per call forward and per call backward, each reached cold
  (timings ``dtensor_norm_forward`` and ``..._backward``,
  `profiles.profiler.dtensor_norm`); fallback 0: `costmodel.runtimes.torch.ops` then counts the
  norm's DTensor operators.
- DTensor: per element-wise operator forward and backward, per ``from_local`` and
  ``to_local``, per column-parallel ``F.linear`` forward and backward (timings
  ``dtensor_*``, `profiles.profiler.framework`). Fallback: fixed ratios to
  ``forward_op_s`` (`DTENSOR_FALLBACK_RATIOS`), so that a CPU profile without these
  timings still charges tensor parallelism for DTensor instead of pricing it like plain
  operators.
- element-wise kernels: the profile times the executor's own RMSNorm (six kernels with
  fresh outputs, reductions and broadcasts, the fp32 ``rmsnorm`` streams, nominal bytes
  2·N·e, timed with inputs and outputs beyond the per-core caches as in a step,
  `profiles.profiler.compute.cold_rmsnorm`). A line t = a + b·bytes through its points up to
  `RMSNORM_FIT_MAX_BYTES` gives the cost of one such kernel, ``elementwise_op_s`` = a / 6
  (dispatch, output allocation and launch; at least one dispatch, and no more than that when
  a < 0, the points bending upwards past the per-core cache), and the rate of the bytes the
  cost model counts for it (7·N·e, `costmodel.runtimes.torch.ops.rms_norm`),
  ``elementwise_Bps`` = 7 / (2·b). Fallback (fewer than two points): one dispatch and the
  streaming bandwidth.
- transcendental element-wise kernels (SiLU and GELU, the loss's ``log_softmax``, forward
  and backward): ``transcendental``, what each call and element costs beyond its operator
  counts' price, from a line through the host section's cold kernel rows
  (`profiles.schema_host.HostTranscendental`, `costmodel.runtimes.torch.transcendental_rates`).
  Fallback (a profile measured before the probe): nothing, the bytes alone.
- transposing copies: the profile times ``x.view(-1, 128).t().contiguous()``
  (the fp32 ``transpose`` streams, 2·N·e); ``transpose_Bps`` is 1 / b of the line
  t = a + b·bytes through those points (the dispatch is counted with the operator).
  Fallback: ``elementwise_Bps``.
- pipelining's P2P posts: ``p2p_post_s`` is the mean of the timing ``p2p_post``
  (each sample the mean time of posting a send or a receive of 64 KiB in a ring of every
  rank, `profiles.profiler.collective_forms`), read as measured, like the functional
  extra: posting waits on the communication library's own threads, whose scheduling on a
  shared host is not the dispatch's. Fallback: `P2P_POST_FALLBACK_DISPATCHES` dispatches.
- FSDP2: the host cost of one module's parameter all-gather and of its gradient reduce-
  scatter (timings ``fsdp_gather`` and ``fsdp_reduce``, one-tensor modules,
  and ``fsdp_gather_tensor`` and ``fsdp_reduce_tensor`` per further tensor; fallback for
  those two: two dispatches, and a DTensor ``from_local``), and AdamW per sharded DTensor
  parameter (``dtensor_adamw``). Fallback: `FSDP_FALLBACK_DISPATCHES`
  dispatches per gather or reduce, and the plain AdamW tensor plus `DTENSOR_ADAMW_OPS`
  DTensor operators.
- activation checkpointing (non-reentrant ``torch.utils.checkpoint``): per saved tensor and
  per checkpointed call (timings ``checkpoint_tensor`` and ``..._call``).
  Fallback: three dispatches per tensor (two pack hooks and an unpack hook), nothing per call.
- collectives: what a waited-for call, a call reached after host work, a functional or
  autograd all-to-all call and a DTensor redistribution cost beyond the α-β fit
  (`costmodel.runtimes.torch.host_rates_collectives`).
- the executor's operator mix: ``dispatch_s``, ``forward_op_s``, ``backward_node_s`` and
  ``elementwise_op_s`` are multiplied by the ratio of a chain of the executor's norm,
  rotary and residual operators, timed cold (timings ``op_mix_forward`` and
  ``_backward``), to what these figures price it at (`costmodel.runtimes.torch.op_mix_rates`).
  Fallback: 1.
- a MoE layer's expert-parallel exchanges: ``moe_exchange`` from the probe of the
  executor's exchange pattern (timings ``moe_exchange_<pass>_w<level>`` and
  ``moe_layer_<pass>_w<level>``, `costmodel.runtimes.torch.moe_exchange_rates`).
  Fallback: None, each call priced as above.
- FSDP2's gathers: ``fsdp_context`` from the probe of blocks of a layer's size among layers
  of host work (timings ``fsdp_context_<pass>_w<level>`` and
  ``fsdp_layer_<pass>_w<level>``, `costmodel.runtimes.torch.fsdp_rates`). Fallback:
  None, each gather priced from the idle module's figures.
- activation checkpointing: ``checkpoint_context`` from the probe of checkpointed blocks
  among layers of host work (timings ``ckpt_full_<pass>_w<level>``,
  ``ckpt_part_...`` and ``ckpt_layer_...``, `costmodel.runtimes.torch.checkpoint_rates`). Fallback:
  None, each call priced from ``checkpoint_call_s`` and ``checkpoint_tensor_s``.
- DTensor's operators in context: ``dtensor_context`` from the probe of a DTensor linear
  among layers of host work (timings ``dtensor_context_<pass>_w<level>`` and
  ``dtensor_layer_<pass>_w<level>``, `costmodel.runtimes.torch.dtensor_rates`).
  Fallback: None, the loop figures alone.
- AdamW: `torch.optim.AdamW.step` over parameter tensors is linear in the tensor count
  and the bytes: t = tensors·per_tensor + bytes / rate, fitted by least squares through the
  profile's fp32 ``adamw`` streams (each over `ADAMW_SWEEP_TENSORS`
  tensors; 28 bytes per parameter). Fallback: `ADAMW_OPS_PER_TENSOR` operators of
  ``dispatch_s`` per tensor and the memory-bound bandwidth.

Every host timing (the collectives' apart) is taken relative to the plain
dispatch measured in the same sweep (``add``) and multiplied by
``op_overhead_s``, and every byte rate relative to the streaming ``x + y`` of the same sweep
(a line through the fp32 ``add`` streams) and multiplied by the profile's
memory-bound bandwidth: the figures of one sweep share the host's speed, and a calibration
that rescales ``op_overhead_s`` or ``memory_bandwidth_efficiency`` (`reports.calibrate`)
rescales them all. A timing is read by the mean of its samples, but for the paired
differences (`PAIRED_TIMINGS`: the functional, redistribution and autograd exchange
extras) by their median, the mean where the profile predates it: the median of a few
adjacent pairs leaves out a preemption inside its window, which a mean over the windows
would carry into every call.

The constants named here, the timings' figures and the fits are in
`costmodel.runtimes.torch.host_rate_fits`.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.runtimes.torch.checkpoint_rates import CheckpointContext, checkpoint_context_rates
from costmodel.runtimes.torch.fsdp_rates import fsdp_context_rates
from costmodel.runtimes.torch.host_rate_fits import (
    DTENSOR_ADAMW_OPS,
    DTENSOR_FALLBACK_RATIOS,
    FSDP_FALLBACK_DISPATCHES,
    FUNCTIONAL_COLLECTIVES,
    P2P_POST_FALLBACK_DISPATCHES,
    adamw_fit,
    byte_rate_scale,
    collective_excess_by_size,
    elementwise_fit,
    host_figures,
    redistribute_extra_by_op,
    transpose_rate,
)
from costmodel.runtimes.torch.host_rates_collectives import CollectiveHostRates
from costmodel.runtimes.torch.in_context_rates import InContext
from costmodel.runtimes.torch.moe_exchange_rates import moe_exchange_rates
from costmodel.runtimes.torch.transcendental_rates import (
    NO_TRANSCENDENTAL,
    TranscendentalRates,
    transcendental_rates,
)
from profiles.lookup import memory_bandwidth_Bps
from profiles.schema import HardwareProfile


@dataclass(frozen=True, kw_only=True, slots=True)
class HostRates(CollectiveHostRates):
    """Per-operator host costs of one CPU rank (seconds) and its memory rate, with the
    collectives' host costs of `CollectiveHostRates`."""

    dispatch_s: float
    """A metadata-only or unrecorded operator."""
    forward_op_s: float
    """An operator recorded by autograd in the forward pass."""
    routing_op_s: float
    """One operator of a MoE layer's token-routing bookkeeping (top-k, sorts, indexing)."""
    backward_node_s: float
    """One autograd node run by the backward pass (its first kernel included)."""
    backward_call_s: float
    """One ``backward()`` call: engine start and graph setup."""
    bandwidth_Bps: float
    """Bytes per second of streaming copies (gradient buckets, FSDP2 copies)."""
    elementwise_op_s: float
    """One element-wise kernel writing a fresh activation-sized output, bytes apart."""
    elementwise_Bps: float
    """Bytes per second of the executor's element-wise kernels."""
    transpose_Bps: float
    """Bytes per second of a copy that reads or writes with a stride (a transpose)."""
    p2p_post_s: float
    """Posting one pipelining P2P operation (its wait apart)."""
    dtensor_forward_s: float
    """An element-wise operator on DTensors, recorded by autograd."""
    dtensor_backward_s: float
    """The backward node of one such operator."""
    dtensor_from_local_s: float
    """``DTensor.from_local`` (also the backward of ``to_local``)."""
    dtensor_to_local_s: float
    """``DTensor.to_local`` (also the backward of ``from_local`` without communication)."""
    dtensor_linear_forward_s: float
    """Host cost of ``F.linear`` on a replicated input and a sharded weight, beyond its
    GEMM kernel."""
    dtensor_linear_backward_s: float
    """Host cost of that linear's backward (both gradients, their nodes and gradient
    accumulation), beyond its GEMM kernels."""
    dtensor_norm_forward_s: float = 0.0
    """A sequence-parallel RMSNorm's forward (``from_local`` and its operators), reached
    cold; 0 when the profile did not time it."""
    dtensor_norm_backward_s: float = 0.0
    """Its backward, reached cold; 0 when not timed."""
    checkpoint_tensor_s: float
    """Checkpoint hooks of one saved tensor (pack, pack in the rerun, unpack)."""
    checkpoint_call_s: float
    """One checkpointed call's setup and tensor matching, its rerun apart."""
    fsdp_gather_s: float
    """Host cost of one FSDP2 module's parameter all-gather, collective and bytes apart."""
    fsdp_reduce_s: float
    """Host cost of one FSDP2 module's gradient reduce-scatter, collective and bytes apart."""
    fsdp_gather_tensor_s: float
    """Extra cost of an FSDP2 gather per further parameter tensor of the module."""
    fsdp_reduce_tensor_s: float
    """Extra cost of an FSDP2 reduce-scatter per further parameter tensor of the module."""
    adamw_tensor_s: float
    """AdamW step per parameter tensor, beyond its bytes."""
    dtensor_adamw_tensor_s: float
    """AdamW step per DTensor parameter tensor (tensor parallelism, FSDP2), bytes apart."""
    adamw_Bps: float
    """AdamW bytes (`ADAMW_BYTES_PER_PARAM` per parameter) per second."""
    op_mix: float = 1.0
    """The factor `costmodel.runtimes.torch.op_mix_rates` applied to the per-operator figures (1:
    none)."""
    moe_exchange: InContext | None = None
    """A MoE layer's expert-parallel exchanges in context
    (`costmodel.runtimes.torch.moe_exchange_rates`); None when the profile did not probe them (then
    priced call by call)."""
    fsdp_context: InContext | None = None
    """FSDP2's gathers in their chain (`costmodel.runtimes.torch.fsdp_rates`); None when the profile
    did not probe them (then priced from the idle module's figures)."""
    checkpoint_context: CheckpointContext | None = None
    """Activation checkpointing in its chain (`costmodel.runtimes.torch.checkpoint_rates`); None
    when the profile did not probe it (then priced from ``checkpoint_call_s`` and
    ``checkpoint_tensor_s``)."""
    dtensor_context: InContext | None = None
    """A DTensor linear's wrap, operator and unwrap in their chain
    (`costmodel.runtimes.torch.dtensor_rates`); None when the profile did not probe it (then DTensor
    operators cost their loop figures)."""
    transcendental: TranscendentalRates = NO_TRANSCENDENTAL
    """Prices of transcendental element-wise kernels beyond their operator counts' price
    (`costmodel.runtimes.torch.transcendental_rates`); nothing when the profile did not
    probe them."""


def kernel_bound_rates(profile: HardwareProfile) -> HostRates:
    """The `HostRates` of a profile without a host section (a GPU's): no host cost at all,
    every byte rate the profile's memory-bound bandwidth. The host issues operators ahead of
    the device, so a step is priced by its kernels alone."""
    bandwidth = memory_bandwidth_Bps(profile)
    return HostRates(
        dispatch_s=0.0,
        forward_op_s=0.0,
        routing_op_s=0.0,
        backward_node_s=0.0,
        backward_call_s=0.0,
        bandwidth_Bps=bandwidth,
        elementwise_op_s=0.0,
        elementwise_Bps=bandwidth,
        transpose_Bps=bandwidth,
        p2p_post_s=0.0,
        dtensor_forward_s=0.0,
        dtensor_backward_s=0.0,
        dtensor_from_local_s=0.0,
        dtensor_to_local_s=0.0,
        dtensor_linear_forward_s=0.0,
        dtensor_linear_backward_s=0.0,
        checkpoint_tensor_s=0.0,
        checkpoint_call_s=0.0,
        fsdp_gather_s=0.0,
        fsdp_reduce_s=0.0,
        fsdp_gather_tensor_s=0.0,
        fsdp_reduce_tensor_s=0.0,
        adamw_tensor_s=0.0,
        dtensor_adamw_tensor_s=0.0,
        adamw_Bps=bandwidth,
    )


def base_host_rates(profile: HardwareProfile) -> HostRates:
    """The `HostRates` of ``profile`` (sources and fallbacks in the module doc) without
    the DTensor-context and operator-mix fits, which `costmodel.runtimes.torch.rates`
    adds; `kernel_bound_rates` for a profile without a host section."""
    host = profile.host
    if host is None:
        return kernel_bound_rates(profile)
    dispatch = profile.compute.op_overhead_s
    means, scale = host_figures(host, dispatch)

    def get(name: str, fallback: float) -> float:
        value = means.get(name)
        return value * scale if value is not None and value > 0 else fallback

    forward = get("autograd_forward", dispatch)
    node = get("autograd_backward_node", get("autograd_backward", dispatch))
    call = get("autograd_backward_call", 0.0) if "autograd_backward_node" in means else 0.0
    dtensor = {name: get(name, ratio * forward) for name, ratio in DTENSOR_FALLBACK_RATIOS.items()}
    rate = byte_rate_scale(profile, host, dispatch)
    adamw_tensor, adamw_rate = adamw_fit(profile, host, dispatch)
    adamw_tensor *= scale
    elementwise_s, elementwise_rate = elementwise_fit(profile, host, scale, rate)
    rates = HostRates(
        dispatch_s=dispatch,
        forward_op_s=forward,
        routing_op_s=get("routing_op", forward),
        backward_node_s=node,
        backward_call_s=call,
        bandwidth_Bps=memory_bandwidth_Bps(profile),
        elementwise_op_s=max(elementwise_s, dispatch),
        elementwise_Bps=elementwise_rate,
        transpose_Bps=transpose_rate(host, rate, elementwise_rate),
        p2p_post_s=means.get("p2p_post", P2P_POST_FALLBACK_DISPATCHES * dispatch),
        dtensor_forward_s=dtensor["dtensor_forward"],
        dtensor_backward_s=dtensor["dtensor_backward"],
        dtensor_from_local_s=dtensor["dtensor_from_local"],
        dtensor_to_local_s=dtensor["dtensor_to_local"],
        dtensor_linear_forward_s=dtensor["dtensor_linear_forward"],
        dtensor_linear_backward_s=dtensor["dtensor_linear_backward"],
        dtensor_norm_forward_s=get("dtensor_norm_forward", 0.0),
        dtensor_norm_backward_s=get("dtensor_norm_backward", 0.0),
        checkpoint_tensor_s=get("checkpoint_tensor", 3 * dispatch),
        checkpoint_call_s=get("checkpoint_call", 0.0),
        fsdp_gather_s=get("fsdp_gather", FSDP_FALLBACK_DISPATCHES * dispatch),
        fsdp_reduce_s=get("fsdp_reduce", FSDP_FALLBACK_DISPATCHES * dispatch),
        fsdp_gather_tensor_s=get("fsdp_gather_tensor", 2 * dispatch),
        fsdp_reduce_tensor_s=get("fsdp_reduce_tensor", dtensor["dtensor_from_local"]),
        adamw_tensor_s=adamw_tensor,
        dtensor_adamw_tensor_s=get(
            "dtensor_adamw", adamw_tensor + DTENSOR_ADAMW_OPS * dtensor["dtensor_forward"]
        ),
        adamw_Bps=adamw_rate * rate,
        collective_excess=collective_excess_by_size(profile, host),
        functional_extra=tuple(
            (op, max(means.get(f"functional_{op}", 0.0), 0.0)) for op in FUNCTIONAL_COLLECTIVES
        ),
        sync_excess_s=max(means.get("sync_wait", 0.0), 0.0),
        autograd_exchange_s=max(
            means.get(
                "autograd_all_to_all",
                2 * means.get("functional_all_to_all", 0.0),
            ),
            0.0,
        ),
        redistribute_extra=redistribute_extra_by_op(
            means, scale, dtensor["dtensor_forward"] + dtensor["dtensor_to_local"]
        ),
        moe_exchange=moe_exchange_rates(means, scale),
        fsdp_context=fsdp_context_rates(means, scale),
        checkpoint_context=checkpoint_context_rates(means, scale),
        transcendental=transcendental_rates(
            host,
            scale=scale,
            elementwise_op_s=max(elementwise_s, dispatch),
            elementwise_Bps=elementwise_rate,
        ),
    )
    return rates


def backward_scale(profile: HardwareProfile) -> float:
    """`HostOverheads.backward_scale` of the profile's host section; 1 without one."""
    return profile.host.backward_scale if profile.host is not None else 1.0


def layer_collective_scale(profile: HardwareProfile) -> float:
    """`HostOverheads.layer_collective_scale` of the profile's host section; 1 without one."""
    return profile.host.layer_collective_scale if profile.host is not None else 1.0
