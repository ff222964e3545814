"""Timing primitives of the profiler: repeat planning, timed loops and the timing records.

Conventions
- Every record keeps the per-call seconds of each timed sample (`times_s`); a sample is
  the mean of ``inner`` back-to-back calls, so sub-microsecond timer noise and the Python
  loop cost vanish for tiny operators while large ones are timed one call at a time.
- The figure that fits and validations use is `typical_s`: the median sample of compute
  records, the fastest fifth's edge (`COLLECTIVE_QUANTILE`) of collective records; the
  spread (mean, stdev, min, max) goes into the profile's provenance.
- On CUDA a sample is bracketed by ``torch.cuda.synchronize()``, so it measures device
  time of the whole inner loop, not launch time.
- ``agree`` is how the ranks of a sweep settle on one repeat plan: it returns the
  largest of every rank's estimate (an all-reduce MAX), so all ranks run the same loops
  at the same time and the contention each sample sees matches a real training step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from profiles.schema_provenance import MeasurementSpread
from specs.host import stolen_cpu_s

T = TypeVar("T")
StealReader = Callable[[], float | None]
"""The machine's CPU seconds taken by the hypervisor so far (`specs.host.stolen_cpu_s`)."""

Agree = Callable[[float], float]
"""Maps this rank's estimate (seconds) to the agreed one (the max over the ranks)."""


def agree_alone(value: float) -> float:
    """The `Agree` of a single process: its own estimate."""
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """How much time one measured point may take."""

    warmup_calls: int
    """Untimed calls before the estimate (caches, allocator, lazy initialisation)."""
    min_repeats: int
    """Fewest timed samples per point."""
    max_repeats: int
    """Most timed samples per point."""
    target_s: float
    """Time to spend on the timed samples of one point when the operator is fast."""
    min_sample_s: float
    """Shortest sample: faster operators are looped ``inner`` times per sample."""


QUICK_COMM_BUDGET = Budget(
    warmup_calls=1, min_repeats=5, max_repeats=40, target_s=0.08, min_sample_s=1e-4
)
"""`--quick` collectives, per pass: short independent samples (see `COMM_PASSES`)."""
FULL_COMM_BUDGET = Budget(
    warmup_calls=2, min_repeats=5, max_repeats=20, target_s=0.15, min_sample_s=1e-4
)
"""Full collective sweep, per pass."""
COMM_PASSES = 3
"""Collective sweeps run this many passes over all their points and pool the samples:
a burst of other load on the host then hits a few samples of many points instead of
every sample of a few."""
QUICK_BUDGET = Budget(
    warmup_calls=2, min_repeats=5, max_repeats=15, target_s=0.06, min_sample_s=4e-4
)
"""`--quick`: enough samples for a stable median within 2 minutes on a host of two cores."""
FULL_BUDGET = Budget(warmup_calls=3, min_repeats=9, max_repeats=41, target_s=0.4, min_sample_s=1e-3)
"""Full sweep: more samples per point for tighter spreads."""


def per_pass(budget: Budget, passes: int) -> Budget:
    """The share of ``budget`` one of ``passes`` visits to a point gets: the time target
    and the sample bounds divided (at least 2 samples a visit), the warm-up kept whole
    (every visit rebuilds its operands)."""
    return Budget(
        warmup_calls=budget.warmup_calls,
        min_repeats=max(2, math.ceil(budget.min_repeats / passes)),
        max_repeats=max(2, math.ceil(budget.max_repeats / passes)),
        target_s=budget.target_s / passes,
        min_sample_s=budget.min_sample_s,
    )


def repeat_plan(estimate_s: float, budget: Budget) -> tuple[int, int]:
    """(inner calls per sample, samples) for an operator of ``estimate_s`` per call.

    Inner loops lift a sample to `Budget.min_sample_s`; the sample count fills
    `Budget.target_s`, clamped to the budget's bounds.
    """
    per_call = max(estimate_s, 1e-7)
    inner = max(1, math.ceil(budget.min_sample_s / per_call))
    repeats = round(budget.target_s / (per_call * inner))
    return inner, min(budget.max_repeats, max(budget.min_repeats, repeats))


def _synchronize(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


Clock = Callable[[], float]
"""A clock in seconds: ``time.perf_counter`` (wall) or ``time.thread_time`` (CPU)."""
WALL_CLOCK: Clock = time.perf_counter
"""Elapsed time: what a device sees, including time taken by anything else running."""
THREAD_CLOCK: Clock = time.thread_time
"""CPU time of the calling thread (user + system, page faults included): the work of a
single-threaded operator without the time other processes held its core."""


def clock_for(*, cuda: bool, threads: int, ranks_per_node: int, cores: int) -> Clock:
    """`THREAD_CLOCK` when a CPU rank computes on one thread of a core of its own (every
    ATen, MKL and oneDNN kernel then runs on the calling thread, and ranks never share a
    core), so other processes on the machine cannot inflate the timings; else
    `WALL_CLOCK` (GPUs, multi-threaded ranks, and oversubscribed ranks, whose sharing of
    cores is part of what training sees)."""
    if not cuda and threads == 1 and ranks_per_node <= cores:
        return THREAD_CLOCK
    return WALL_CLOCK


def time_calls(
    fn: Callable[[], object], *, inner: int, repeats: int, cuda: bool, clock: Clock = WALL_CLOCK
) -> list[float]:
    """Per-call seconds of ``repeats`` samples of ``inner`` back-to-back calls of ``fn``."""
    samples = []
    for _ in range(repeats):
        _synchronize(cuda)
        start = clock()
        for _ in range(inner):
            fn()
        _synchronize(cuda)
        samples.append((clock() - start) / inner)
    return samples


def measure(
    fn: Callable[[], object],
    budget: Budget,
    *,
    cuda: bool,
    agree: Agree,
    clock: Clock = WALL_CLOCK,
) -> list[float]:
    """Warm up, estimate one call, agree on a plan with the other ranks, then time."""
    for _ in range(budget.warmup_calls):
        fn()
    estimate = min(time_calls(fn, inner=1, repeats=2, cuda=cuda, clock=clock))
    inner, repeats = repeat_plan(agree(estimate), budget)
    return time_calls(fn, inner=inner, repeats=repeats, cuda=cuda, clock=clock)


def steal_watched(fn: Callable[[], T], read: StealReader = stolen_cpu_s) -> tuple[T, bool]:
    """``fn()`` and whether the hypervisor took CPU time from the machine while it ran (by
    ``read``: the steal column of ``/proc/stat``, `specs.host.stolen_cpu_s`; False where
    the kernel does not report it). The column counts in ticks of the kernel's clock
    (10 ms), so a window of tens of milliseconds reads either nothing or at least a tick."""
    before = read()
    out = fn()
    after = read()
    return out, before is not None and after is not None and after > before


def unstolen(windows: Sequence[tuple[T, bool]]) -> list[T]:
    """The values of the (value, stolen) windows during which the hypervisor took none of
    the machine's CPU, or all of them when it took some in each: a stolen slice stops one
    rank for milliseconds while its peer waits in a call or a timed pass runs on, a cost no
    step of an undisturbed host pays (the fidelity bench sets stolen runs aside likewise);
    on a shared virtual machine steal comes in spells of seconds to minutes."""
    quiet = [value for value, stolen in windows if not stolen]
    return quiet or [value for value, _ in windows]


def spread(quantity: str, times_s: tuple[float, ...]) -> MeasurementSpread:
    """The `MeasurementSpread` (seconds) of one record's samples."""
    mean = statistics.fmean(times_s)
    stdev = statistics.stdev(times_s) if len(times_s) > 1 else 0.0
    return MeasurementSpread(
        quantity=quantity,
        unit="s",
        num_samples=len(times_s),
        mean=mean,
        stdev=stdev,
        min=min(min(times_s), mean),
        max=max(max(times_s), mean),
        median=statistics.median(times_s),
    )


# ---- timing records ------------------------------------------------------------------
# Records are plain frozen dataclasses so spawned ranks can pickle them back to rank 0.


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmTiming:
    """Timed (m x k) @ (k x n) products of one dtype."""

    dtype: str
    """dtype key (`fp32`, `bf16`, ...)."""
    m: int
    """Rows of the output."""
    n: int
    """Columns of the output."""
    k: int
    """Reduction length."""
    pattern: str
    """How the operands were laid out: `linear` (x @ W.T, a forward), `dgrad` (g @ W),
    `wgrad` (g.T @ x)."""
    times_s: tuple[float, ...]
    """Per-call seconds of each sample."""

    @property
    def flops(self) -> float:
        """2·m·n·k."""
        return 2.0 * self.m * self.n * self.k

    @property
    def quantity(self) -> str:
        """Name in the provenance spread."""
        return f"gemm.{self.dtype}.{self.pattern}.{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionTiming:
    """Timed causal `scaled_dot_product_attention` forward or backward."""

    dtype: str
    """dtype key."""
    direction: str
    """`forward` or `backward`."""
    batch: int
    """Sequences."""
    heads: int
    """Attention heads (queries = keys/values)."""
    seq_len: int
    """Tokens per sequence."""
    head_dim: int
    """Head dimension."""
    times_s: tuple[float, ...]
    """Per-call seconds of each sample."""

    @property
    def causal_flops(self) -> float:
        """FlashAttention convention: forward 2·b·h·s²·d under a causal mask (half of
        4·b·h·s²·d), backward 2.5 times that (see `profiles.schema`)."""
        forward = 2.0 * self.batch * self.heads * self.seq_len**2 * self.head_dim
        return forward * (2.5 if self.direction == "backward" else 1.0)

    @property
    def quantity(self) -> str:
        """Name in the provenance spread."""
        return (
            f"attention.{self.dtype}.{self.direction}.b{self.batch}h{self.heads}"
            f"s{self.seq_len}d{self.head_dim}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryTiming:
    """A timed memory-bound operator over one tensor size."""

    op: str
    """`copy` (into a preallocated tensor), `add`, `rmsnorm` or `adamw`."""
    dtype: str
    """dtype key of the tensors."""
    bytes_moved: int
    """Bytes the operator must read and write at least once (see `compute`)."""
    times_s: tuple[float, ...]
    """Per-call seconds of each sample."""

    @property
    def quantity(self) -> str:
        """Name in the provenance spread."""
        return f"memory.{self.op}.{self.dtype}.{self.bytes_moved}B"


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscendentalTiming:
    """A timed transcendental element-wise kernel over one tensor size
    (`profiles.profiler.transcendental`)."""

    op: str
    """One of `profiles.schema_host.TRANSCENDENTAL_OPS`."""
    elements: int
    """Elements of the kernel's output per call."""
    times_s: tuple[float, ...]
    """Per-call seconds of each sample."""

    @property
    def quantity(self) -> str:
        """Name in the provenance spread."""
        return f"transcendental.{self.op}.{self.elements}"


@dataclass(frozen=True, kw_only=True, slots=True)
class OverheadTiming:
    """Host time per call of a tiny operator (work negligible)."""

    op: str
    """`add` (plain dispatch, the `op_overhead_s` figure), `autograd_forward` or
    `autograd_backward` (per operator of a recorded chain)."""
    times_s: tuple[float, ...]
    """Per-call seconds of each sample."""

    @property
    def quantity(self) -> str:
        """Name in the provenance spread."""
        return f"op_overhead.{self.op}"


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveTiming:
    """A timed collective for one size, group size and placement."""

    op: str
    """Schema op name: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv."""
    group_size: int
    """Ranks in the group."""
    placement: str
    """`intra` or `inter` node."""
    size_bytes: int
    """nccl-tests size convention (`profiles.schema_network.BUS_FACTOR_DOC`)."""
    concurrent_groups: int
    """Disjoint groups of this size that ran the same collective at the same time."""
    times_s: tuple[float, ...]
    """Per-call seconds of each sample, the slowest rank's."""

    @property
    def quantity(self) -> str:
        """Name in the provenance spread."""
        return f"{self.op}.{self.placement}.{self.group_size}.{self.size_bytes}B"


COLLECTIVE_QUANTILE = 0.2
"""A collective record's typical figure is this quantile of its samples (`typical_s`)."""


def low_quantile(times_s: tuple[float, ...], q: float) -> float:
    """The sample at rank ``q`` of ``times_s`` sorted (0: the fastest), no interpolation."""
    ordered = sorted(times_s)
    return ordered[int(q * (len(ordered) - 1))]


def typical_s(record: GemmTiming | AttentionTiming | MemoryTiming | CollectiveTiming) -> float:
    """The figure fits and validations use for a record.

    Compute records: the median sample. Collective records: the edge of the fastest fifth
    of the samples (`COLLECTIVE_QUANTILE`), because they are wall-clock timings of several
    processes that each need a core at the right moment, and other load on a host only
    ever adds time, often to most samples of a point (Python's `timeit` reads the minimum
    for the same reason). The single fastest sample is a rare extreme on a contended host,
    and a line through such extremes misses the held-out points by more than one through
    the edge of the fastest fifth.
    """
    if isinstance(record, CollectiveTiming):
        return low_quantile(record.times_s, COLLECTIVE_QUANTILE)
    return statistics.median(record.times_s)
