"""Paired timings of a chain of layers with and without a mechanism, at levels of host
work between the layers: the shared loop of the in-context probes (`moe_exchange`: the
expert-parallel exchanges; `fsdp_context`: FSDP2's gathers; `checkpoint_context`: activation
checkpointing).

A mechanism that waits on the peer rank costs more inside a chain of host work than alone:
each call waits for the rank that reached it later, and the ranks drift apart over the
work between the calls. A mechanism of the host alone (a checkpoint's hooks) costs more
there too: its code and data are cold after a layer of other work. So a probe times a
chain of layers of the executor's pattern against the same chain without the mechanism
(its base), in rounds from a barrier (base, barrier, each variant with the mechanism after
its own barrier; no barrier on one rank), forward and backward timed apart (wall clock),
at each level of host work, and records per layer of the chain:

- ``<extra>_<pass>_w<level>``: a variant's pass less the base's (one name per variant);
- ``<layer>_<pass>_w<level>``: the base's pass: the host work per layer at that level,
  which `costmodel.runtimes.torch.in_context_rates.InContext` interpolates on.

Each sample is the mean of `PAIRS_PER_SAMPLE` consecutive pairs (a step pays every wait,
the long ones too), of the rounds during which the hypervisor took none of the machine's
CPU (`profiles.profiler.timing.unstolen`; all rounds when it took some in each): a stolen
slice stops one rank for milliseconds while its peer waits, which no step of an undisturbed
host pays (the fidelity bench sets stolen runs aside likewise).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from profiles.profiler.compute import Runner
from profiles.profiler.timing import OverheadTiming, steal_watched, unstolen

CHAIN_LAYERS = 4
"""Layers chained between two meetings of the ranks (their drift grows over the chain)."""
WORK_GEMMS = 40
"""Products of a (128, 128) activation by a 128 x 128 weight, each with a tanh, per layer at
a probe's worked level (milliseconds of forward work on one CPU core)."""
PAIRS = 24
"""Timed pairs per level."""
PAIRS_PER_SAMPLE = 4
"""Consecutive pairs whose mean makes one sample."""
PASSES = ("forward", "backward")

WIDTH = 128
"""Rows and columns of a work block's weights."""
TOKENS = 128
"""Rows of a chain's input."""
TENSORS = 9
"""Weights per work block (a Llama layer's count: four attention and three MLP matrices,
two norms)."""
BLOCK_LEVELS = (TENSORS, WORK_GEMMS)
"""Products per `WorkBlock` at the two levels of host work of the probes built on it: one
per weight, and `WORK_GEMMS`."""


def product(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One unit of a block's host work: a product and its tanh."""
    return torch.tanh(h @ weight)


class WorkBlock(torch.nn.Module):
    """A layer of host work: `TENSORS` weights of `WIDTH` x `WIDTH` fp32, ``work`` products
    of the input with them in turn (at least one per weight: every weight gets a gradient,
    as in training), plus the residual; ``last`` (default `product`) runs the last one."""

    def __init__(
        self,
        work: int,
        device: torch.device,
        last: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = product,
    ) -> None:
        super().__init__()
        self.work = work
        self.last = last
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(WIDTH, WIDTH, device=device) * 0.05)
            for _ in range(TENSORS)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i in range(self.work - 1):
            h = product(h, self.weights[i % TENSORS])
        return self.last(h, self.weights[(self.work - 1) % TENSORS]) + x


Chain = Callable[[int, int], tuple[float, float]]
"""(host work, variant) -> (forward s, backward s) of one chain; variant 0 is the base,
1, 2, ... those with the mechanism."""


def timed_passes(run: Runner, forward: Callable[[], torch.Tensor]) -> tuple[float, float]:
    """(forward s, backward s) of ``forward()`` and the backward of its result's sum."""
    start = time.perf_counter()
    loss = forward().sum()
    if run.cuda:
        torch.cuda.synchronize()
    middle = time.perf_counter()
    loss.backward()
    if run.cuda:
        torch.cuda.synchronize()
    return middle - start, time.perf_counter() - middle


def _samples(values: list[float]) -> tuple[float, ...]:
    """Means of `PAIRS_PER_SAMPLE` consecutive values (the last of what is left)."""
    step = PAIRS_PER_SAMPLE
    return tuple(statistics.fmean(values[i : i + step]) for i in range(0, len(values), step))


def _meet() -> None:
    """Barrier of every rank; nothing on one rank or without a process group."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _level(
    run: Runner, chain: Chain, work: int, per: tuple[int, int], variants: int
) -> dict[str, list[float]]:
    """Per-layer base passes and per-unit differences of each variant at one level
    (``extra<v>_<pass>``, v from 1), one entry per round; ``per``: (layers, units) of a
    chain. A round during which the hypervisor took the machine's CPU is left out
    (`timing.unstolen`)."""
    layers, units = per

    def one_round() -> tuple[tuple[float, float], list[tuple[float, float]]]:
        _meet()
        base = chain(work, 0)
        reals = []
        for v in range(1, variants + 1):
            _meet()
            reals.append(chain(work, v))
        return base, reals

    for _ in range(run.budget.warmup_calls):
        one_round()
    rounds = unstolen([steal_watched(one_round, run.steal) for _ in range(PAIRS)])
    out: dict[str, list[float]] = {f"layer_{p}": [] for p in PASSES}
    out.update({f"extra{v}_{p}": [] for v in range(1, variants + 1) for p in PASSES})
    for base, reals in rounds:
        for j, p in enumerate(PASSES):
            out[f"layer_{p}"].append(base[j] / layers)
            for v, real in enumerate(reals, start=1):
                out[f"extra{v}_{p}"].append((real[j] - base[j]) / units)
    return out


def time_in_context(
    run: Runner,
    chain: Chain,
    *,
    levels: tuple[int, ...],
    extras: tuple[str, ...],
    layer: str,
    per: tuple[int, int],
) -> tuple[OverheadTiming, ...]:
    """The records of the module doc; ``extras``: the variants' prefixes (variant v is
    ``extras[v - 1]``), ``layer``: the base's; ``per``: the chain's layers (the base's
    divisor) and units of the mechanism (the differences')."""
    records = []
    for level, work in enumerate(levels):
        found = _level(run, chain, work, per, len(extras))
        for p in PASSES:
            for v, extra in enumerate(extras, start=1):
                samples = _samples(found[f"extra{v}_{p}"])
                records.append(OverheadTiming(op=f"{extra}_{p}_w{level}", times_s=samples))
            records.append(
                OverheadTiming(op=f"{layer}_{p}_w{level}", times_s=_samples(found[f"layer_{p}"]))
            )
    return tuple(records)
