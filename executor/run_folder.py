"""The run folder of `paraplan execute` (`executor.run`): the ranks' reports merged on rank 0.

Run folder: ``plan.json`` (the PlanBundle), ``metrics.json``, ``measured.json`` (the
Timeline of the last profiled step), ``traces/rank{r}.json`` (raw Chrome traces),
``steps/rank{r}.jsonl`` (`StepLog`: each rank's steps as they ran) and, after a failure,
``failure.log`` (every rank's traceback).
``metrics.json`` keys: ``status`` (``completed`` or ``failed``), ``iteration_time_s``
(every measured step, the slowest rank's time),
``iteration_time_p50_s``, ``iteration_time_p95_s``, ``tokens_per_s``, ``mfu`` (null without
a peak or model FLOPs), ``loss`` and ``warmup_loss`` (per step), ``peak_memory_gib`` (per
rank), ``memory_source``, ``collectives`` (`executor.measure.collective_ledger`),
``profiled_steps`` (indices into ``iteration_time_s``), ``timed_steps`` (the indices the
statistics use), ``first_step``, ``tokens_per_iteration``, ``world_size``,
``model_flops_per_iteration`` and ``peak_flops_per_rank``; with `RunConfig.host_probe`
also ``host_probe_s`` and ``host_probe_p50_s``; where the kernel reports steal time,
``host_steal`` (per measured step) and ``host_steal_timed`` (over the timed steps);
``pipeline_schedule`` (`executor.pipeline.schedule_name`: null without pipelining) and
``pipeline_schedule_note`` (why it differs from Megatron's, `executor.pipeline.schedule_note`;
null when it does not).

A failed run's ``metrics.json`` (`write_failed_run`) holds what the step logs recorded:
``status`` ``failed``, ``failure`` (``rank``, ``error_type``, ``cause``: the one-line root
cause, ``context``: the other ranks' lines, ``log``; a run interrupted by SIGINT or SIGTERM
has ``rank`` null, ``error_type`` ``Interrupted`` and ``signal``), ``iteration_time_s`` and
``loss`` of the measured steps that every surviving rank finished (the slowest rank's time),
``warmup_loss``, ``steps`` (their step numbers), ``iteration_time_p50_s`` (null without a
measured step), ``first_step``, ``next_step`` (the step after the last one that ran),
``tokens_per_iteration`` and ``world_size``.
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from executor.measure import RankTrace, build_timeline, collective_ledger, step_stats
from executor.pipeline import schedule_name, schedule_note
from executor.run_config import RunConfig
from launch.failures import LaunchError, LaunchInterrupted
from specs import serde
from specs.bundle import PlanBundle
from specs.errors import SpecError

GIB = 2**30
FAILURE_LOG = "failure.log"
"""File of a failed run folder with every rank's traceback."""


RUN_FILES = ("metrics.json", "measured.json", FAILURE_LOG)
"""Files of a run folder that the executor writes from a run's measurement."""
RUN_FOLDERS = ("steps", "traces")
"""Folders of a run folder with one file per rank of a run (`StepLog`, Chrome traces)."""
PREDICTION_FILES = ("estimate.json", "predicted.json")
"""Files of a run folder with the cost model's view of its plan."""


def clear_previous_run(out_dir: str | Path, bundle: PlanBundle) -> tuple[str, ...]:
    """Remove what an earlier run left in ``out_dir`` (`RUN_FILES`, `RUN_FOLDERS`, and
    `PREDICTION_FILES` when its ``plan.json`` holds another plan), so a new run, complete or
    failed, is never read together with the old one's measurement; ``plan.json`` and the
    files of `paraplan plan --out` beside it stay. Returns the names removed."""
    out = Path(out_dir)
    removed = [name for name in RUN_FILES if (out / name).is_file()]
    removed += [name for name in RUN_FOLDERS if (out / name).is_dir()]
    if removed and not _holds_plan(out / "plan.json", bundle):
        removed += [name for name in PREDICTION_FILES if (out / name).is_file()]
    for name in removed:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return tuple(removed)


def _holds_plan(path: Path, bundle: PlanBundle) -> bool:
    """Whether ``path`` is the plan file of ``bundle`` (an unreadable one is not)."""
    try:
        return serde.load(PlanBundle, path) == bundle
    except SpecError:
        return False


class StepLog:
    """One rank's ``steps/rank{r}.jsonl``: a JSON line per finished step (``step``,
    ``phase`` warmup or measured, ``time_s``, ``loss``), flushed at once, so the steps that
    ran survive a failure of any rank."""

    def __init__(self, out_dir: str | Path, rank: int) -> None:
        path = Path(out_dir) / "steps" / f"rank{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w")

    def append(self, *, step: int, time_s: float, loss: float, phase: str) -> None:
        """Record one finished step."""
        record = {"step": step, "phase": phase, "time_s": time_s, "loss": loss}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()


def read_step_logs(out_dir: str | Path) -> list[list[dict[str, Any]]]:
    """Every rank's `StepLog` records (a torn last line, from a kill mid-write, is left out)."""
    logs = []
    for path in sorted((Path(out_dir) / "steps").glob("rank*.jsonl")):
        records = []
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                break
        logs.append(records)
    return logs


def failure_fields(error: LaunchError | LaunchInterrupted) -> dict[str, Any]:
    """``metrics.json``'s ``failure`` object: the root-cause rank and error of a failed
    launch; for an interrupted one ``rank`` null, ``error_type`` ``Interrupted`` and
    ``signal`` the signal's name."""
    common = {"cause": error.headline(), "context": error.context(), "log": FAILURE_LOG}
    if isinstance(error, LaunchInterrupted):
        return {"rank": None, "error_type": "Interrupted", "signal": error.signal_name, **common}
    return {"rank": error.original.rank, "error_type": error.original.error_type, **common}


def write_failed_run(
    config: RunConfig, error: LaunchError | LaunchInterrupted, *, first_step: int
) -> Path:
    """``plan.json``, ``failure.log`` and the failed (or interrupted) run's ``metrics.json``
    (module doc) from the step logs the ranks left; returns the metrics path."""
    b, out = config.bundle, Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / FAILURE_LOG).write_text(error.full_report())
    logs = read_step_logs(out)
    times: dict[int, list[float]] = defaultdict(list)
    losses: dict[int, float] = {}
    phases: dict[int, str] = {}
    for records in logs:
        for r in records:
            times[r["step"]].append(r["time_s"])
            losses.setdefault(r["step"], r["loss"])
            phases[r["step"]] = r["phase"]
    # A step counts when every rank that logged anything finished it.
    ranks = max(1, sum(1 for records in logs if records))
    done = sorted(s for s, ts in times.items() if len(ts) >= ranks)
    measured = [s for s in done if phases[s] == "measured"]
    per_step = [max(times[s]) for s in measured]
    metrics = {
        "status": "failed",
        "failure": failure_fields(error),
        "iteration_time_s": per_step,
        "iteration_time_p50_s": statistics.median(per_step) if per_step else None,
        "loss": [losses[s] for s in measured],
        "warmup_loss": [losses[s] for s in done if phases[s] == "warmup"],
        "steps": measured,
        "first_step": first_step,
        "next_step": (done[-1] + 1) if done else first_step,
        "tokens_per_iteration": b.job.tokens_per_iteration,
        "world_size": b.plan.world_size,
    }
    (out / "plan.json").write_text(serde.dumps(b))
    path = out / "metrics.json"
    path.write_text(json.dumps(metrics, indent=2) + "\n")
    return path


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
    schedule_note: str | None = None
    """Why the pipeline ran another schedule than Megatron's (`executor.pipeline.schedule_note`);
    None when it ran the same."""


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
    microbatches = b.plan.num_microbatches(b.job.global_batch_size)
    metrics = {
        "status": "completed",
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
        "pipeline_schedule": schedule_name(b.plan, microbatches),
        "pipeline_schedule_note": schedule_note(b.plan, microbatches),
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
        schedule_note=metrics["pipeline_schedule_note"],
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
