"""Compute points of one rank: GEMMs, causal attention, memory-bound operators, the
optimizer step and the per-operator overhead.

Every rank of a profiling world runs the same sweep at the same time (each with its fair
share of CPU threads), because that is how the executor's ranks compute: the timings
include the contention for cores, caches and memory bandwidth that a training step sees.

Operators are issued the way a training step issues them: outputs are freshly allocated
(``F.linear``, ``x + y``), attention inputs require gradients, the backward runs through
autograd, and a GEMM or attention point rotates through operand sets larger than a core's
L2 (`COLD_POOL_BYTES`), because a training step reads a weight or an activation again only
after the rest of the step has passed through the cache. Bytes moved per memory-bound
call, the figure bandwidth is quoted against:
- ``copy``: ``dst.copy_(src)``, 2·n·e (read and write n elements of e bytes);
- ``add``: ``x + y``, 3·n·e;
- ``rmsnorm``: the executor's ``x · rsqrt(mean(x²) + eps) · w`` over rows of 1024, 2·n·e,
  with inputs and outputs cold (`cold_rmsnorm`);
- ``transpose``: ``x.view(-1, 128).t().contiguous()``, 2·n·e (a copy that reads or writes
  with a stride: a few times slower than ``copy`` per byte on CPUs);
- ``adamw``: ``torch.optim.AdamW.step`` over P fp32 parameters, 28·P (reads parameter,
  gradient and both moments, writes parameter and both moments).
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from profiles.profiler.shapes import AttentionShape, GemmShape
from profiles.profiler.timing import (
    WALL_CLOCK,
    Agree,
    AttentionTiming,
    Budget,
    Clock,
    GemmTiming,
    MemoryTiming,
    OverheadTiming,
    StealReader,
    TranscendentalTiming,
    measure,
    steal_watched,
    time_calls,
    unstolen,
)
from specs.host import stolen_cpu_s

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""Profile dtype keys and the torch dtypes they are measured with."""
NORM_WIDTH = 1024
"""Row width of the RMSNorm-like sweep (a hidden size of the tiny-to-small models)."""
ADAMW_TENSORS = 16
"""Parameter tensors the optimizer sweep splits its parameters into (a few layers)."""
CHAIN_LENGTH = 16
"""Operators in the autograd chain that times per-operator forward and backward cost."""
COLD_POOL_BYTES = 8 << 20
"""Bytes of GEMM operands a point rotates through: a few times a server core's L2 (1-2 MiB
on Xeon and EPYC parts), so that small GEMMs are timed with operands that come from
farther away, as in a training step; with one operand set a small GEMM runs from L1/L2
and reads faster than the same product in a step."""
MAX_OPERAND_SETS = 256
"""At most this many operand sets per GEMM point."""
TRANSPOSE_WIDTH = 128
"""Row width of the transposing copy (``x.view(-1, W).t().contiguous()``): the executor's
expert-weight gradients arrive transposed and are stacked so (`executor.moe.Experts`)."""

Tick = Callable[[str], None]
"""Called once per planned point (measured or skipped) with a short label."""


@dataclass(kw_only=True, slots=True)
class ComputeResults:
    """Everything one rank's compute sweep timed."""

    gemms: list[GemmTiming] = field(default_factory=list)
    """GEMMs of the efficiency curves."""
    misaligned: list[tuple[GemmTiming, GemmTiming]] = field(default_factory=list)
    """(aligned, misaligned) GEMM pairs."""
    attention: list[AttentionTiming] = field(default_factory=list)
    """Causal attention, forward and backward."""
    memory: list[MemoryTiming] = field(default_factory=list)
    """Memory-bound operators and optimizer steps."""
    overhead: list[OverheadTiming] = field(default_factory=list)
    """Tiny-operator host times."""
    transcendental: list[TranscendentalTiming] = field(default_factory=list)
    """Transcendental element-wise kernels (CPU ranks, `profiles.profiler.transcendental`)."""
    skipped: list[str] = field(default_factory=list)
    """Points left out because they would exceed the per-call time limit."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Runner:
    """Where and how a rank times its operators."""

    device: torch.device
    """Device the tensors live on."""
    budget: Budget
    """Samples per point."""
    agree: Agree
    """Settles estimates across the ranks (max)."""
    clock: Clock = WALL_CLOCK
    """Wall or thread CPU time (`timing.clock_for`)."""
    steal: StealReader = stolen_cpu_s
    """The machine's CPU seconds taken by the hypervisor so far (`timing.steal_watched`)."""

    @property
    def cuda(self) -> bool:
        """True on a CUDA device (samples are synchronized)."""
        return self.device.type == "cuda"

    def time(self, fn: Callable[[], object]) -> tuple[float, ...]:
        """Per-call seconds of each sample of ``fn``."""
        return tuple(measure(fn, self.budget, cuda=self.cuda, agree=self.agree, clock=self.clock))

    def paired(
        self,
        form: Callable[[], object],
        base: Callable[[], object],
        sync: Callable[[], object],
        *,
        pairs: int,
        per_sample: int,
    ) -> tuple[float, ...]:
        """What ``form`` costs beyond ``base``, call by call: ``pairs`` pairs of one
        ``base`` then one ``form`` call, each timed from a ``sync`` of the ranks (a barrier:
        a rank that arrives late waits in it, not in the timed call); each sample is the
        median difference of ``per_sample`` consecutive pairs. A pair sees one state of a
        shared host, and the median leaves out the preemptions that hit either call, so the
        difference holds where means of separate runs of each form do not. A sample during
        which the hypervisor took the machine's CPU is left out (`timing.unstolen`), as the
        fidelity bench sets stolen runs aside. A spell of the host that outlasts a sample
        still moves it, even without counted steal, so the cost model reads these samples
        by their median (`costmodel.runtimes.torch.host_rate_fits.PAIRED_TIMINGS`)."""
        for _ in range(self.budget.warmup_calls):
            base()
            form()

        def difference() -> float:
            sync()
            (base_s,) = time_calls(base, inner=1, repeats=1, cuda=self.cuda, clock=self.clock)
            sync()
            (form_s,) = time_calls(form, inner=1, repeats=1, cuda=self.cuda, clock=self.clock)
            return form_s - base_s

        def window(size: int) -> Callable[[], list[float]]:
            return lambda: [difference() for _ in range(size)]

        windows = [
            steal_watched(window(min(per_sample, pairs - i)), self.steal)
            for i in range(0, pairs, per_sample)
        ]
        return tuple(statistics.median(diffs) for diffs in unstolen(windows))

    def randn(self, *shape: int, dtype: str = "fp32", grad: bool = False) -> torch.Tensor:
        """A random tensor on the device."""
        t = torch.randn(*shape, dtype=TORCH_DTYPES[dtype], device=self.device)
        return t.requires_grad_(grad)


def operand_sets(run: Runner, operand_bytes: int) -> int:
    """How many operand sets a point rotates through: enough that together they exceed
    `COLD_POOL_BYTES` (on CUDA, also twice the device's L2), so each call reads its
    operands from beyond the nearest caches, as in a training step, where the rest of the
    step passes through the cache between two uses of a weight; capped at `MAX_OPERAND_SETS`."""
    pool = COLD_POOL_BYTES
    if run.cuda:
        pool = max(pool, 2 * torch.cuda.get_device_properties(run.device).L2_cache_size)
    return max(1, min(MAX_OPERAND_SETS, -(-pool // max(operand_bytes, 1))))


def gemm_operands(run: Runner, shape: GemmShape) -> Callable[[], torch.Tensor]:
    """The call of one GEMM, operands laid out as its pattern has them in training; each
    call takes the next of `operand_sets` sets (module doc)."""
    dtype, m, n, k, pattern = shape
    if pattern == "linear":
        dims, call = ((m, k), (n, k)), F.linear
    elif pattern == "dgrad":
        dims, call = ((m, k), (k, n)), torch.matmul
    else:
        dims, call = ((k, m), (k, n)), lambda g, x: torch.matmul(g.t(), x)
    one_set = sum(rows * cols for rows, cols in dims) * TORCH_DTYPES[dtype].itemsize
    sets = [
        tuple(run.randn(*d, dtype=dtype) for d in dims) for _ in range(operand_sets(run, one_set))
    ]
    turn = itertools.count()
    return lambda: call(*sets[next(turn) % len(sets)])


def time_gemm(run: Runner, shape: GemmShape) -> GemmTiming:
    """One GEMM point."""
    dtype, m, n, k, pattern = shape
    times = run.time(gemm_operands(run, shape))
    return GemmTiming(dtype=dtype, m=m, n=n, k=k, pattern=pattern, times_s=times)


def time_attention(run: Runner, shape: AttentionShape) -> tuple[AttentionTiming, ...]:
    """Causal SDPA forward (autograd recording, as in training) and backward; each call
    takes the next of `operand_sets` sets of q, k and v (and, backward, of the output's
    graph and gradient), so that small shapes read their operands from beyond the nearest
    caches, as the GEMM points do."""
    dtype, b, h, s, d = shape
    sets = operand_sets(run, 3 * b * h * s * d * TORCH_DTYPES[dtype].itemsize)
    qkv = [
        tuple(run.randn(b, h, s, d, dtype=dtype, grad=True) for _ in range(3)) for _ in range(sets)
    ]
    forward_turn, backward_turn = itertools.count(), itertools.count()

    def forward() -> torch.Tensor:
        q, k, v = qkv[next(forward_turn) % sets]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    outs = [forward() for _ in range(sets)]
    grads = [torch.randn_like(out) for out in outs]

    def backward() -> tuple[torch.Tensor, ...]:
        i = next(backward_turn) % sets
        return torch.autograd.grad(outs[i], qkv[i], grads[i], retain_graph=True)

    backward_times = run.time(backward)
    forward_times = run.time(forward)
    return tuple(
        AttentionTiming(
            dtype=dtype,
            direction=direction,
            batch=b,
            heads=h,
            seq_len=s,
            head_dim=d,
            times_s=times,
        )
        for direction, times in (("forward", forward_times), ("backward", backward_times))
    )


def cold_rmsnorm(run: Runner, elements: int, dtype: str) -> Callable[[], torch.Tensor]:
    """The RMSNorm-like call as a training step issues the executor's element-wise
    operators: each call reads the next of `operand_sets` inputs and its output is held
    for as many calls, so that inputs and outputs come from beyond the per-core caches.
    In a step every element-wise output is a fresh activation (held for the backward) and
    every input was written operators earlier; with one input, and its output freed at
    once, the allocator hands the same hot block back and the call runs from L1/L2, several
    times faster per byte at the executor's activation sizes (64 KiB to 1 MiB) on hosts
    whose per-core cache is small against their shared one."""
    sets = operand_sets(run, elements * TORCH_DTYPES[dtype].itemsize)
    inputs = [run.randn(elements, dtype=dtype).view(-1, NORM_WIDTH) for _ in range(sets)]
    w = run.randn(NORM_WIDTH, dtype=dtype)
    held: deque[torch.Tensor] = deque(maxlen=sets)
    turn = itertools.count()

    def rmsnorm() -> torch.Tensor:
        rows = inputs[next(turn) % sets]
        out = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        held.append(out)
        return out

    return rmsnorm


def time_memory_ops(run: Runner, elements: int, dtype: str) -> tuple[MemoryTiming, ...]:
    """copy, add, RMSNorm-like and a transposing copy over ``elements`` elements (bytes in
    the module doc). copy, add and the transposing copy run on one operand set (the
    streaming rates of the device); the RMSNorm-like call, which prices the executor's
    element-wise operators, runs cold (`cold_rmsnorm`)."""
    e = TORCH_DTYPES[dtype].itemsize
    x, y, dst = (run.randn(elements, dtype=dtype) for _ in range(3))
    ops = (
        ("copy", lambda: dst.copy_(x), 2 * elements * e),
        ("add", lambda: x + y, 3 * elements * e),
        ("rmsnorm", cold_rmsnorm(run, elements, dtype), 2 * elements * e),
        ("transpose", lambda: x.view(-1, TRANSPOSE_WIDTH).t().contiguous(), 2 * elements * e),
    )
    return tuple(
        MemoryTiming(op=op, dtype=dtype, bytes_moved=nbytes, times_s=run.time(fn))
        for op, fn, nbytes in ops
    )


def time_adamw(run: Runner, params: int) -> MemoryTiming:
    """One `torch.optim.AdamW.step` over ``params`` fp32 parameters in a few tensors."""
    per_tensor = max(1, params // ADAMW_TENSORS)
    tensors = [run.randn(per_tensor, grad=True) for _ in range(ADAMW_TENSORS)]
    for t in tensors:
        t.grad = torch.randn_like(t)
    optimizer = torch.optim.AdamW(tensors, lr=1e-6, betas=(0.9, 0.95), weight_decay=0.1)
    times = run.time(optimizer.step)
    return MemoryTiming(
        op="adamw", dtype="fp32", bytes_moved=28 * per_tensor * ADAMW_TENSORS, times_s=times
    )


def time_overheads(run: Runner, *, autograd: bool = True) -> tuple[OverheadTiming, ...]:
    """Host time per call of a tiny operator: plain dispatch (``x + y`` on one-element
    tensors, the `op_overhead_s` figure), and with ``autograd`` (CPU ranks) per operator of
    an autograd chain, forward and backward, which a training step pays on top of
    dispatch."""
    x, y = run.randn(1), run.randn(1)
    leaf = run.randn(1, grad=True)

    def chain() -> torch.Tensor:
        z = leaf
        for _ in range(CHAIN_LENGTH):
            z = z * y
        return z

    plain = run.time(lambda: x + y)
    if not autograd:
        return (OverheadTiming(op="add", times_s=plain),)
    forward = run.time(chain)
    both = run.time(lambda: chain().backward())
    fwd_median = sorted(forward)[len(forward) // 2]
    backward = tuple(max(t - fwd_median, 0.0) / CHAIN_LENGTH for t in both)
    return (
        OverheadTiming(op="add", times_s=plain),
        OverheadTiming(op="autograd_forward", times_s=tuple(t / CHAIN_LENGTH for t in forward)),
        OverheadTiming(op="autograd_backward", times_s=backward),
    )
