"""Host operators of the executor's modules, counted from its code, and their time on a CPU.

The executor (`executor.model`, `.tensor_parallel`, `.context_parallel`, `.moe`) runs
eager PyTorch in fp32 on a CPU: every operator is dispatched, recorded by autograd and run
on the calling thread, and every autograd node is run by the engine on the backward. A pass
is therefore a list of operators, each costing its host overhead plus its kernel:

- ``ops``: operators recorded by autograd (forward) or autograd nodes (backward), each
  `HostRates.forward_op_s` or `HostRates.backward_node_s` (a node's first kernel included);
- ``routing_ops``: forward operators of a MoE layer's token-routing bookkeeping (top-k,
  sorts, indexing, bincounts, ``index_add``), `HostRates.routing_op_s` each, as the
  profile times them: reached cold, once per layer;
- ``views``: metadata-only or no-op dispatches (view, transpose, unsqueeze, chunk, a cast to
  the same dtype): `HostRates.dispatch_s` each;
- ``kernels``: further kernels inside a backward node (a product's two gradients, the sum
  of gradients reaching one tensor from several uses): `HostRates.dispatch_s` each;
- ``allocs``: those of the above that are element-wise kernels writing a fresh
  activation-sized tensor, which cost `HostRates.elementwise_op_s` rather than a tiny
  operator's dispatch (the difference is added);
- ``bytes``: read plus written by the element-wise kernels, at `HostRates.elementwise_Bps`
  (both figures measured on the executor's RMSNorm, `costmodel.runtimes.torch.host_rates`);
- ``activation_kernels`` and ``activation_elements``, ``log_softmax_kernels`` and
  ``log_softmax_elements``: the transcendental kernels among them (SiLU or GELU; the loss's
  ``log_softmax``) and their elements, which pay `HostRates.transcendental` on top
  of their operator counts, forward or backward (the probe's line in place of the per-byte
  price, `costmodel.runtimes.torch.transcendental_rates`);
- ``transposed_bytes``: read plus written by copies with a stride on one side (the stack
  of the experts' transposed weight gradients), at `HostRates.transpose_Bps`;
- ``p2p_posts``: pipelining's sends and receives, posted one by one, `HostRates.p2p_post_s`
  each (their transfer is an edge of the schedule, `costmodel.pipeline_sim`);
- ``kernel_s``: GEMM and attention kernels from the profile's curves, their dispatch taken
  out (it is counted above);
- DTensor (tensor parallelism): ``dt_ops`` element-wise operators or redistributions,
  ``dt_wraps`` (``from_local``, and the backward of ``to_local``), ``dt_unwraps``
  (``to_local``, and the backward of ``from_local``), ``dt_linears`` (a linear on DTensors,
  forward or backward), each at its `HostRates` figure.

Counts are per microbatch and per rank, written next to the code they count (torch 2.13).
Shapes: T tokens of the rank (micro_batch · seq / cp), Tn = T / tp under sequence
parallelism (else T), D hidden, Q = heads · head_dim / tp, KV = query groups · head_dim /
tp, F MLP width / tp, e = 4 bytes (the executor computes in fp32 on a CPU whatever the job
precision: `executor.precision`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from costmodel.compute import gemm_time_s, op_overhead_s
from costmodel.runtimes.torch.host_rates import HostRates
from profiles.schema import HardwareProfile

FP32 = 4
"""Bytes per element: the executor keeps CPU activations, weights and gradients in fp32."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostOps:
    """Operators of one pass (see the module doc for each count's price)."""

    ops: float = 0.0
    """Operators recorded by autograd (forward) or autograd nodes (backward)."""
    routing_ops: float = 0.0
    """Forward operators of a MoE layer's token routing (priced at `HostRates.routing_op_s`)."""
    views: float = 0.0
    """Metadata-only or no-op dispatches."""
    kernels: float = 0.0
    """Extra kernels inside backward nodes."""
    allocs: float = 0.0
    """Operators and kernels among the above that write a fresh activation-sized tensor."""
    bytes: float = 0.0
    """Bytes moved by element-wise kernels."""
    transposed_bytes: float = 0.0
    """Bytes moved by copies that read or write with a stride (stacking transposed tensors)."""
    p2p_posts: float = 0.0
    """Pipelining P2P operations posted (a send or a receive, waited for elsewhere)."""
    kernel_s: float = 0.0
    """GEMM and attention kernel seconds (dispatch excluded)."""
    dt_ops: float = 0.0
    """DTensor element-wise operators and redistributions."""
    dt_wraps: float = 0.0
    """``DTensor.from_local`` calls (and backward of ``to_local``)."""
    dt_unwraps: float = 0.0
    """``DTensor.to_local`` calls (and backward of ``from_local``)."""
    dt_linears: float = 0.0
    """Linears on DTensor weights."""
    dt_norms: float = 0.0
    """Sequence-parallel RMSNorm modules, priced whole (`HostRates.dtensor_norm_forward_s`
    and ``..._backward_s``; without them as `DTENSOR_RMSNORM_FORWARD` and ``_BACKWARD``),
    their bytes apart."""
    activation_kernels: float = 0.0
    """SiLU or GELU kernels (each also counted as an operator or kernel, with its bytes)."""
    activation_elements: float = 0.0
    """Their elements."""
    log_softmax_kernels: float = 0.0
    """``log_softmax`` kernels (each also counted as an operator, with its bytes)."""
    log_softmax_elements: float = 0.0
    """Their elements."""

    def plus(self, other: HostOps) -> HostOps:
        """Field-wise sum."""
        return HostOps(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in _F})

    def scaled(self, factor: float) -> HostOps:
        """Every count times ``factor``."""
        return HostOps(**{f.name: getattr(self, f.name) * factor for f in _F})


_F = fields(HostOps)
NONE = HostOps()


def host_seconds(work: HostOps, rates: HostRates, *, backward: bool) -> float:
    """Seconds of ``work`` on one rank (prices in the module doc)."""
    priced = rates.transcendental
    if backward:
        per_op, dt_op, dt_linear = (
            rates.backward_node_s,
            rates.dtensor_backward_s,
            rates.dtensor_linear_backward_s,
        )
        activation, log_softmax = priced.activation_backward, priced.log_softmax_backward
    else:
        per_op, dt_op, dt_linear = (
            rates.forward_op_s,
            rates.dtensor_forward_s,
            rates.dtensor_linear_forward_s,
        )
        activation, log_softmax = priced.activation_forward, priced.log_softmax_forward
    return (
        work.ops * per_op
        + (work.dt_norms * _dtensor_norm_s(rates, backward=backward) if work.dt_norms else 0.0)
        + work.routing_ops * rates.routing_op_s
        + (work.views + work.kernels) * rates.dispatch_s
        + work.allocs * max(rates.elementwise_op_s - rates.dispatch_s, 0.0)
        + work.bytes / rates.elementwise_Bps
        + work.transposed_bytes / rates.transpose_Bps
        + work.p2p_posts * rates.p2p_post_s
        + work.kernel_s
        + work.dt_ops * dt_op
        + work.dt_wraps * rates.dtensor_from_local_s
        + work.dt_unwraps * rates.dtensor_to_local_s
        + work.dt_linears * dt_linear
        + activation.extra_s(work.activation_kernels, work.activation_elements)
        + log_softmax.extra_s(work.log_softmax_kernels, work.log_softmax_elements)
    )


DTENSOR_RMSNORM_FORWARD = HostOps(dt_ops=6, views=3, allocs=6, dt_wraps=1)
"""A sequence-parallel RMSNorm's forward counted operator by operator (`rms_norm`): the
price of `HostOps.dt_norms` when the profile did not time the module."""
DTENSOR_RMSNORM_BACKWARD = HostOps(dt_ops=7, kernels=5, allocs=11, dt_unwraps=1)
"""Its backward, counted the same way."""


def _dtensor_norm_s(rates: HostRates, *, backward: bool) -> float:
    """One sequence-parallel RMSNorm pass: the profile's cold figure, else counted."""
    measured = rates.dtensor_norm_backward_s if backward else rates.dtensor_norm_forward_s
    if measured > 0:
        return measured
    counted = DTENSOR_RMSNORM_BACKWARD if backward else DTENSOR_RMSNORM_FORWARD
    return host_seconds(counted, rates, backward=backward)


@dataclass(frozen=True, kw_only=True, slots=True)
class Comm:
    """Collectives a pass issues and waits for (on one thread nothing hides them)."""

    lane: str
    """Timeline lane: ``tp``, ``cp`` or ``ep``."""
    op: str
    """all_reduce, all_gather, reduce_scatter or all_to_all."""
    size_bytes: float
    """nccl-tests size of one call (`costmodel.collectives`)."""
    count: float = 1.0
    """Calls per pass."""
    functional: bool = True
    """Issued through functional collectives (DTensor's redistributions, ``funcol``), as
    every collective inside the executor's layers is but the MoE count exchange and the
    load-balancing statistics (plain ``torch.distributed`` calls): such a call pays
    `HostRates.functional_s` on top of the profile's fit."""
    autograd: bool = False
    """The autograd form of a functional all-to-all (the MoE token exchange): each call,
    forward or backward, pays half of `HostRates.autograd_exchange_s` instead of the
    functional extra."""
    exchange: bool = False
    """One of a MoE layer's expert-parallel exchanges (its count exchange, or its two token
    exchanges of a pass): priced per layer in context
    (`costmodel.runtimes.torch.moe_exchange_rates`) when the profile probed them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleOps:
    """One module's forward and backward, per microbatch."""

    forward: HostOps = NONE
    """Forward operators."""
    backward: HostOps = NONE
    """Backward nodes and kernels."""
    forward_comms: tuple[Comm, ...] = ()
    """Collectives of the forward."""
    backward_comms: tuple[Comm, ...] = ()
    """Collectives of the backward."""

    def plus(self, other: ModuleOps) -> ModuleOps:
        """Both modules, one after the other."""
        return ModuleOps(
            forward=self.forward.plus(other.forward),
            backward=self.backward.plus(other.backward),
            forward_comms=self.forward_comms + other.forward_comms,
            backward_comms=self.backward_comms + other.backward_comms,
        )

    def scaled(self, factor: float) -> ModuleOps:
        """The module repeated ``factor`` times."""
        return ModuleOps(
            forward=self.forward.scaled(factor),
            backward=self.backward.scaled(factor),
            forward_comms=tuple(_times(c, factor) for c in self.forward_comms),
            backward_comms=tuple(_times(c, factor) for c in self.backward_comms),
        )


def _times(comm: Comm, factor: float) -> Comm:
    return replace(comm, count=comm.count * factor)


def _rows(value: float) -> int:
    return max(math.ceil(value), 1)


def gemm_kernel_s(profile: HardwareProfile, m: float, n: float, k: float) -> float:
    """Kernel seconds of an fp32 (m x k) @ (k x n) GEMM: the profile's time less its
    dispatch (counted by the caller)."""
    t = gemm_time_s(profile, _rows(m), _rows(n), _rows(k), "fp32")
    return max(t - op_overhead_s(profile), 0.0)


def linear(
    profile: HardwareProfile,
    tokens: float,
    out_features: float,
    in_features: float,
    *,
    dtensor: bool = False,
    accumulate: float = 1.0,
) -> ModuleOps:
    """``nn.Linear`` without bias on a 3-D input (the executor's only linear).

    Forward: ``F.linear`` reshapes to 2-D, runs ``mm`` and views the result back (aten
    linear -> t, matmul -> view, mm, _unsafe_view: one recorded operator, three views).
    Backward: UnsafeView, Mm (dgrad and wgrad GEMMs), T and View nodes, then
    AccumulateGrad of the weight, which adds into the existing gradient on all but the
    first microbatch (``accumulate`` is that share: 3 passes over the weight).
    On DTensor weights the whole dispatch is one `HostRates.dtensor_linear_forward_s` /
    ``_backward_s`` on top of the kernels.
    """
    fwd_k = gemm_kernel_s(profile, tokens, out_features, in_features)
    bwd_k = gemm_kernel_s(profile, tokens, in_features, out_features)
    bwd_k += gemm_kernel_s(profile, in_features, out_features, tokens)
    acc_bytes = accumulate * 3 * FP32 * out_features * in_features
    if dtensor:
        return ModuleOps(
            forward=HostOps(kernel_s=fwd_k, dt_linears=1),
            backward=HostOps(kernel_s=bwd_k, dt_linears=1, bytes=acc_bytes),
        )
    return ModuleOps(
        forward=HostOps(ops=1, views=3, kernel_s=fwd_k),
        backward=HostOps(ops=5, kernels=1, kernel_s=bwd_k, bytes=acc_bytes),
    )


def rms_norm(rows: float, width: int, *, dtensor: bool = False) -> ModuleOps:
    """`executor.model.RMSNorm` over ``rows`` x ``width`` (N elements).

    Forward: pow, mean, add(eps), rsqrt, mul, mul(weight) recorded; two ``.float()`` and one
    ``type_as`` are no-op casts in fp32. Bytes: pow 2N, mean N, both products 2N each
    (the T-sized rsqrt path is negligible): 7N·e. Backward: Pow, Mean, Add, Rsqrt and two Mul
    nodes plus the weight's AccumulateGrad; the products' second gradients, their
    reductions (over the row for rsqrt, over tokens for the weight) and the sum of x's two
    gradients are 5 more kernels; bytes: each Mul 7N (two products and a sum), Mean 2N,
    Pow 5N, the gradient sum 3N: 24N·e. Under sequence parallelism the module is a
    ``SequenceParallel`` DTensor module (the input wrapped with ``from_local``, every
    operator and backward kernel through DTensor's dispatch), priced whole per pass as
    `HostOps.dt_norms`: the profile times it cold (`profiles.profiler.dtensor_norm`: in the
    executor's step it cost 4-5x its operators at the hot DTensor chain rate).
    """
    n = rows * width
    if dtensor:
        return ModuleOps(
            forward=HostOps(dt_norms=1, bytes=7 * n * FP32),
            backward=HostOps(dt_norms=1, bytes=24 * n * FP32),
        )
    return ModuleOps(
        forward=HostOps(ops=6, views=3, allocs=6, bytes=7 * n * FP32),
        backward=HostOps(ops=7, kernels=5, allocs=11, bytes=24 * n * FP32),
    )


def layer_norm(rows: float, width: int, *, dtensor: bool = False) -> ModuleOps:
    """``nn.LayerNorm``: one fused operator (read x, write y: 2N·e); backward one node
    (read x and dy, write dx: 3N·e, plus the weight and bias reductions) and two
    AccumulateGrad nodes."""
    n = rows * width
    kind = "dt_ops" if dtensor else "ops"
    wraps = {"dt_wraps": 1} if dtensor else {}
    unwraps = {"dt_unwraps": 1} if dtensor else {}
    return ModuleOps(
        forward=HostOps(**{kind: 1}, allocs=1, bytes=2 * n * FP32, **wraps),
        backward=HostOps(**{kind: 3}, kernels=2, allocs=1, bytes=4 * n * FP32, **unwraps),
    )


def norm(kind: str, rows: float, width: int, *, dtensor: bool = False) -> ModuleOps:
    """The model's normalization (``rmsnorm`` or ``layernorm``)."""
    if kind == "rmsnorm":
        return rms_norm(rows, width, dtensor=dtensor)
    return layer_norm(rows, width, dtensor=dtensor)


def rope(elements: float) -> ModuleOps:
    """`executor.model.apply_rope` on X = tokens x width elements.

    Forward: chunk and four unsqueezes of the tables (views), neg (X/2 in, X/2 out), cat
    (2X), two muls (2X each) and an add (3X): 5 recorded operators, 10X·e. Backward: Add,
    two Mul (one gradient each: the tables need none), Cat, Neg and Split nodes, and the
    sum of the two gradients reaching x (one kernel): 12X·e.
    """
    return ModuleOps(
        forward=HostOps(ops=5, views=5, allocs=5, bytes=10 * elements * FP32),
        backward=HostOps(ops=6, kernels=1, allocs=5, bytes=12 * elements * FP32),
    )


def residual_add(rows: float, width: int) -> ModuleOps:
    """``x + branch``: one add (3N·e); backward an Add node (no copy) and the sum of the two
    gradients that reach x (3N·e, one kernel)."""
    n = rows * width
    return ModuleOps(
        forward=HostOps(ops=1, allocs=1, bytes=3 * n * FP32),
        backward=HostOps(ops=1, kernels=1, allocs=1, bytes=3 * n * FP32),
    )


def gradient_sum(rows: float, width: int, uses: int) -> ModuleOps:
    """Backward only: autograd adds the gradients of a tensor read by ``uses`` operators
    (uses - 1 kernels of 3N·e)."""
    extra = max(uses - 1, 0)
    return ModuleOps(
        backward=HostOps(kernels=extra, allocs=extra, bytes=extra * 3 * rows * width * FP32)
    )
