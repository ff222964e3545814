"""The run folder of `paraplan execute` (`executor.run`): the ranks' reports merged on rank 0.

Run folder: ``plan.json`` (the PlanBundle), ``metrics.json``, ``measured.json`` (the
Timeline of the last profiled step), ``traces/rank{r}.json`` (raw Chrome traces).
``metrics.json`` keys: ``iteration_time_s`` (every measured step, the slowest rank's time),
``iteration_time_p50_s``, ``iteration_time_p95_s``, ``tokens_per_s``, ``mfu`` (null without
a peak or model FLOPs), ``loss`` and ``warmup_loss`` (per step), ``peak_memory_gib`` (per
rank), ``memory_source``, ``collectives`` (`executor.measure.collective_ledger`),
``profiled_steps`` (indices into ``iteration_time_s``), ``timed_steps`` (the indices the
statistics use), ``first_step``, ``tokens_per_iteration``, ``world_size``,
``model_flops_per_iteration`` and ``peak_flops_per_rank``; with `RunConfig.host_probe`
also ``host_probe_s`` and ``host_probe_p50_s``; where the kernel reports steal time,
``host_steal`` (per measured step) and ``host_steal_timed`` (over the timed steps).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from executor.measure import RankTrace, build_timeline, collective_ledger, step_stats
from specs import serde

if TYPE_CHECKING:
    from executor.run import RunConfig

GIB = 2**30


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """Headline figures of a finished run (everything else is in the run folder)."""

    out_dir: str
    """The run folder."""
    loss: tuple[float, ...]
    """Loss of each measured step."""
    iteration_time_p50_s: float
    """Median iteration time of the timed steps."""
    tokens_per_s: float
    """Throughput at the median iteration time."""
    mfu: float | None
    """Model FLOPs utilization, None without a peak."""
    peak_memory_gib: tuple[float, ...]
    """Peak allocator memory per rank."""
    next_step: int
    """The step a resumed run would train next."""
    steal: float | None = None
    """Share of the machine's CPU time the hypervisor took during the timed steps
    (`steal_metrics`); None where the kernel does not report steal."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankReport:
    """One rank's figures and reduced trace, gathered on rank 0."""

    rank: int
    times_s: tuple[float, ...]
    probe_s: tuple[float, ...]
    steal: tuple[float, ...]
    losses: tuple[float, ...]
    warmup_losses: tuple[float, ...]
    peak_memory_bytes: int
    trace: RankTrace


def write_run(
    config: RunConfig, reports: list[RankReport], *, first_step: int, next_step: int
) -> RunSummary:
    """Merge the ranks' reports into ``metrics.json``, ``measured.json`` and ``plan.json``."""
    b, out = config.bundle, Path(config.out_dir)
    n = config.steps
    per_step = [max(r.times_s[i] for r in reports) for i in range(n)]
    profiled = list(range(n - min(config.profile_steps, n), n))
    timed = [i for i in range(n) if i not in profiled] or list(range(n))
    stats = step_stats(
        [per_step[i] for i in timed],
        tokens_per_iteration=b.job.tokens_per_iteration,
        world_size=b.plan.world_size,
        model_flops_per_iteration=config.model_flops_per_iteration,
        peak_flops_per_rank=config.peak_flops_per_rank,
    )
    traces = [r.trace for r in reports]
    profiled_ids = [first_step + config.warmup + i for i in profiled]
    peak_gib = [r.peak_memory_bytes / GIB for r in sorted(reports, key=lambda r: r.rank)]
    cuda = torch.cuda.is_available()
    metrics = {
        "iteration_time_s": per_step,
        "iteration_time_p50_s": stats.p50_s,
        "iteration_time_p95_s": stats.p95_s,
        "tokens_per_s": stats.tokens_per_s,
        "mfu": stats.mfu,
        "loss": list(reports[0].losses),
        "warmup_loss": list(reports[0].warmup_losses),
        "peak_memory_gib": peak_gib,
        "memory_source": "cuda_allocator" if cuda else "profiler_memory_events",
        "collectives": collective_ledger(traces, steps=profiled_ids),
        "profiled_steps": profiled,
        "timed_steps": timed,
        "first_step": first_step,
        "tokens_per_iteration": b.job.tokens_per_iteration,
        "world_size": b.plan.world_size,
        "model_flops_per_iteration": config.model_flops_per_iteration,
        "peak_flops_per_rank": config.peak_flops_per_rank,
        **probe_metrics(reports),
        **steal_metrics(reports, [per_step[i] for i in timed], timed),
    }
    timeline = build_timeline(
        traces,
        step=profiled_ids[-1] if profiled_ids else -1,
        iteration_time_s=stats.p50_s,
        note=f"measured step {profiled_ids[-1] if profiled_ids else '-'} of plan "
        f"{b.plan.label()}, all {b.plan.world_size} ranks",
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(serde.dumps(b))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (out / "measured.json").write_text(serde.dumps(timeline))
    return RunSummary(
        out_dir=str(out),
        loss=reports[0].losses,
        iteration_time_p50_s=stats.p50_s,
        tokens_per_s=stats.tokens_per_s,
        mfu=stats.mfu,
        peak_memory_gib=tuple(peak_gib),
        next_step=next_step,
        steal=metrics.get("host_steal_timed"),
    )


def probe_metrics(reports: list[RankReport]) -> dict[str, Any]:
    """``host_probe_s`` (per unprofiled step, the mean over the ranks) and its median
    ``host_probe_p50_s``; empty when the ranks did not probe."""
    if not reports[0].probe_s:
        return {}
    per_step = [
        statistics.fmean(r.probe_s[i] for r in reports) for i in range(len(reports[0].probe_s))
    ]
    return {"host_probe_s": per_step, "host_probe_p50_s": statistics.median(per_step)}


def steal_metrics(
    reports: list[RankReport], timed_s: list[float], timed: list[int]
) -> dict[str, Any]:
    """``host_steal``: per measured step, the largest share of a rank's machine's CPU time
    the hypervisor took during it (`specs.host.steal_fraction`); ``host_steal_timed``: the
    same over the timed steps (``timed`` indices, ``timed_s`` their seconds), weighted by
    their times. Empty when a rank's kernel does not report steal time."""
    if not all(r.steal and len(r.steal) == len(r.times_s) for r in reports):
        return {}
    per_step = [max(r.steal[i] for r in reports) for i in range(len(reports[0].steal))]
    wall_s = sum(timed_s)
    stolen = sum(per_step[i] * t for i, t in zip(timed, timed_s, strict=True))
    return {"host_steal": per_step, "host_steal_timed": stolen / wall_s if wall_s > 0 else 0.0}
