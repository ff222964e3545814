"""The training loop of `paraplan execute`: launch, train, measure, write the run folder.

Order of a run (every rank runs `_rank_main`; rank 0 also writes the files):

1. before launch, in the calling process (`executor.preflight.prepare`): the plan, the
   data, a resumed checkpoint, the run and checkpoint folders and the free disk are
   checked, so bad input fails with a `SpecError` before any process starts;
2. build this rank's engine (`RankSetup`, by default `engine_setup`: ParallelContext and
   `executor.engine.Engine`), then give every process group the job's timeout;
3. resume model, optimizer, RNG and step from a checkpoint when asked;
4. ``warmup`` training steps, unmeasured;
5. ``steps`` measured steps, each timed with a wall clock (CUDA synchronized) inside a
   ``paraplan/step {i}`` range; the last `RunConfig.profile_steps` of them run under
   ``torch.profiler``. Profiling slows a step (+10-40% on CPU, reference §6), so when
   unprofiled steps exist the iteration statistics use only those;
   with `RunConfig.host_probe`, every unprofiled step is followed by the host probe and a
   barrier;
   after every step (warmup or measured) each rank appends its time and loss to
   ``steps/rank{r}.jsonl`` in the run folder, and every `RunConfig.save_interval` steps the
   ranks save a periodic checkpoint (`executor.checkpoint.save_step_checkpoint`);
6. save a last checkpoint when asked; each rank reduces its trace to a small
   `executor.measure.RankTrace`, which rank 0 gathers and merges.

When a local launch fails, or SIGINT or SIGTERM interrupts it, the calling process writes
what the ranks left (`executor.run_folder.write_failed_run`: ``metrics.json`` with
``status`` ``failed``, the steps that ran, ``failure.log``) and raises the `LaunchError`
(`LaunchInterrupted`).

Run folder and ``metrics.json``: `executor.run_folder`.
Peak memory: `executor.peak_memory`.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

from executor.checkpoint import (
    checkpoint_meta,
    load_checkpoint,
    save_step_checkpoint,
)
from executor.data import DataSource, open_stream, rank_batch
from executor.launch import (
    LaunchError,
    LaunchInterrupted,
    Progress,
    RankInfo,
    launch,
    set_group_timeouts,
)
from executor.measure import rank_trace
from executor.peak_memory import MemoryWatch, live_bytes
from executor.preflight import prepare
from executor.run_config import RankSetup, RunConfig, Trainer
from executor.run_folder import (
    RankReport,
    RunSummary,
    StepLog,
    write_failed_run,
    write_run,
)
from executor.trace_collectives import group_labels
from specs.bundle import PlanBundle
from specs.host import steal_fraction, stolen_cpu_s

PROBE_CALLS = 5
"""Host-probe calls after each unprofiled step (`RunConfig.host_probe`); their median counts."""


# ---- the calling process ---------------------------------------------------------------------


__all__ = ["RankSetup", "RunConfig", "Trainer", "engine_setup", "execute", "prepare"]


def execute(
    config: RunConfig,
    *,
    announce: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> RunSummary | None:
    """Run the plan and write the run folder; returns rank 0's summary (None on the other
    ranks of a torchrun job). Raises `SpecError` before launch; if a rank fails, writes the
    partial run folder (module doc) and raises `LaunchError`; interrupted by SIGINT or
    SIGTERM, writes it too and raises `LaunchInterrupted`. ``announce`` receives a line
    saying which checkpoint and step a resumed run starts from, and which files of an earlier
    run in the run folder were removed. ``progress(done, total, label)`` is called after
    each of rank 0's steps (warmup included; label ``warmup steps`` or ``measured steps``),
    and once more when the steps are done and the traces are merged.
    """
    ready = prepare(config)
    if announce is not None and ready.replaced:
        announce(f"replacing the earlier run in {config.out_dir}: {', '.join(ready.replaced)}")
    if announce is not None and ready.config.resume_dir is not None:
        announce(f"resuming from step {ready.first_step} ({ready.config.resume_dir})")
    try:
        results = launch(
            _rank_main,
            (ready.config, ready.source),
            world_size=config.bundle.plan.world_size,
            timeout_s=config.timeout_s,
            progress=progress,
        )
    except (LaunchError, LaunchInterrupted) as exc:
        write_failed_run(ready.config, exc, first_step=ready.first_step)
        raise
    return results.get(0)


# ---- every rank --------------------------------------------------------------------------------


def _rank_main(info: RankInfo, config: RunConfig, source: DataSource) -> RunSummary | None:
    device = torch.device(info.device)
    setup = (config.setup or engine_setup)(config.bundle, info, config.seed)
    set_group_timeouts(info.timeout_s)
    memory = MemoryWatch(device)
    b = config.bundle
    stream = open_stream(
        source, vocab_size=b.model.vocab_size, seq_length=b.job.seq_length, seed=config.seed
    )

    def batch(step: int) -> torch.Tensor:
        return rank_batch(
            stream,
            step,
            global_batch_size=b.job.global_batch_size,
            dp_rank=setup.dp_rank,
            dp_size=setup.dp_size,
        )

    step = first_step = _maybe_resume(config, setup)
    log = StepLog(config.out_dir, info.rank)
    saved = {first_step}

    total = config.warmup + config.steps

    def after_step(done: int, seconds: float, loss: float, phase: str) -> None:
        log.append(step=done - 1, time_s=seconds, loss=loss, phase=phase)
        info.emit(done - first_step, total, f"{phase} steps")
        interval = config.save_interval
        if config.save_dir and interval and done % interval == 0 and done not in saved:
            _save(config.save_dir, config, setup, source, done)
            saved.add(done)

    warmup_losses = []
    for i in range(config.warmup):
        tokens = batch(step)
        run = partial(_timed_step, setup.trainer, tokens, step, device)
        # The first step creates optimizer state and gradient buffers: watch its memory.
        seconds, loss = memory.profiled(partial(_live, setup), run) if i == 0 else run()
        warmup_losses.append(loss)
        step += 1
        after_step(step, seconds, loss, "warmup")
    measured = _measured_steps(config, setup, batch, step, device, info, memory, after_step)
    step += config.steps
    if config.save_dir is not None and step not in saved:
        _save(config.save_dir, config, setup, source, step)
    info.emit(total, total, "steps done, merging the ranks' traces")
    report = RankReport(
        rank=info.rank,
        times_s=tuple(measured.times_s),
        probe_s=tuple(measured.probe_s),
        steal=tuple(measured.steal),
        losses=tuple(measured.losses),
        warmup_losses=tuple(warmup_losses),
        peak_memory_bytes=memory.peak_bytes(),
        trace=rank_trace(
            measured.trace_json,
            rank=info.rank,
            flight_records=_flight_records(),
            group_labels=setup.group_labels,
            context_parallel=setup.context_parallel,
        ),
    )
    reports = _gather(report, info)
    if reports is None:
        return None
    return write_run(config, reports, first_step=first_step, next_step=step)


def engine_setup(bundle: PlanBundle, info: RankInfo, seed: int) -> RankSetup:
    """The executor's own engine: `ParallelContext` of the plan, then `Engine.build`."""
    from executor.context import ParallelContext
    from executor.data_parallel import is_expert_parameter
    from executor.engine import Engine
    from executor.pipeline import stage_index

    plan = bundle.plan
    ctx = ParallelContext.create(
        plan, device=torch.device(info.device), local_world_size=info.local_world_size
    )
    engine = Engine.build(bundle, ctx, seed=seed)
    pp_rank = ctx.coords["pp"]
    names: dict[str, list[str]] = defaultdict(list)
    for axis, group in ctx.groups.items():
        names[group.group_name].append(axis)
    return RankSetup(
        trainer=engine,
        parts={
            f"stage{stage_index(plan.pp, pp_rank, j)}": part
            for j, part in enumerate(engine.model_parts)
        },
        dp_rank=ctx.coords["dp"],
        dp_size=plan.dp,
        group_labels={pg: group_labels(axes) for pg, axes in names.items()},
        context_parallel=plan.cp > 1,
        local_keys=is_expert_parameter if plan.ep > 1 else None,
        local_tag=f"ep{ctx.coords.get('ep', 0)}",
    )


def _maybe_resume(config: RunConfig, setup: RankSetup) -> int:
    if config.resume_dir is None:
        return 0
    return load_checkpoint(
        config.resume_dir,
        parts=setup.parts,
        optimizer=setup.trainer.optimizer,
        local_keys=setup.local_keys,
        local_tag=setup.local_tag,
    )


def _save(
    root: str, config: RunConfig, setup: RankSetup, source: DataSource, next_step: int
) -> None:
    save_step_checkpoint(
        root,
        keep=config.keep or 2**31,
        parts=setup.parts,
        optimizer=setup.trainer.optimizer,
        next_step=next_step,
        meta=checkpoint_meta(bundle=config.bundle, seed=config.seed, data=source.describe()),
        local_keys=setup.local_keys,
        local_tag=setup.local_tag,
    )


def _timed_step(
    trainer: Trainer, tokens: torch.Tensor, step: int, device: torch.device
) -> tuple[float, float]:
    """(seconds, loss) of one training step; the batch is fetched before the clock starts,
    as a prefetching data loader would have it ready."""
    _synchronize(device)
    start = time.perf_counter()
    with record_function(f"paraplan/step {step}"):
        result = trainer.train_step(tokens)
    _synchronize(device)
    return time.perf_counter() - start, float(result.loss)


class MeasuredSteps(NamedTuple):
    """One rank's measured steps."""

    times_s: list[float]
    """Wall seconds of each measured step."""
    probe_s: list[float]
    """Host probe after each unprofiled step (`RunConfig.host_probe`; empty without)."""
    steal: list[float]
    """Share of the machine's CPU time the hypervisor took during each measured step
    (`specs.host.steal_fraction`; empty where the kernel does not report steal)."""
    losses: list[float]
    """Loss of each measured step."""
    trace_json: dict[str, Any]
    """Chrome trace of the profiled steps (empty when none was profiled)."""


def _measured_steps(
    config: RunConfig,
    setup: RankSetup,
    batch: Callable[[int], torch.Tensor],
    first: int,
    device: torch.device,
    info: RankInfo,
    memory: MemoryWatch,
    after_step: Callable[[int, float, float, str], None],
) -> MeasuredSteps:
    """Time every measured step, profiling the last ones (the Chrome trace also written to
    ``traces/rank{r}.json``); ``after_step(steps done, seconds, loss, "measured")`` follows
    each step, outside its clock."""
    times, probes, losses, steal = [], [], [], []
    profiled_from = config.steps - min(config.profile_steps, config.steps)
    profiler = None
    probe = config.host_probe() if config.host_probe is not None else None
    for i in range(config.steps):
        if i == profiled_from:
            base_bytes = _live(setup)
            profiler = _trace_profiler(device)
            profiler.start()
        stolen_before = stolen_cpu_s()
        seconds, loss = _timed_step(setup.trainer, batch(first + i), first + i, device)
        stolen_after = stolen_cpu_s()
        times.append(seconds)
        if stolen_before is not None and stolen_after is not None:
            steal.append(steal_fraction(stolen_after - stolen_before, seconds, os.cpu_count() or 1))
        losses.append(loss)
        after_step(first + i + 1, seconds, loss, "measured")
        if probe is not None and profiler is None:
            probes.append(_probe_s(probe))
            if info.world_size > 1:
                dist.barrier()
    trace_json: dict[str, Any] = {}
    if profiler is not None:
        profiler.stop()
        path = Path(config.out_dir) / "traces" / f"rank{info.rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(path))
        trace_json = json.loads(path.read_text())
        memory.note(base_bytes, trace_json)
    return MeasuredSteps(
        times_s=times, probe_s=probes, steal=steal, losses=losses, trace_json=trace_json
    )


def _live(setup: RankSetup) -> int:
    """`live_bytes` of this rank's parts and optimizer."""
    return live_bytes(setup.parts.values(), setup.trainer.optimizer)


def _probe_s(probe: Callable[[], None]) -> float:
    """Median wall seconds of `PROBE_CALLS` calls of the host probe."""
    samples = []
    for _ in range(PROBE_CALLS):
        start = time.perf_counter()
        probe()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _trace_profiler(device: torch.device) -> profile:
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities, profile_memory=device.type == "cpu")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _flight_records() -> list[dict[str, Any]]:
    """This process's flight-recorder entries (empty when the recorder is off)."""
    try:
        dump = torch._C._distributed_c10d._dump_fr_trace_json(True, False)
    except (AttributeError, RuntimeError):
        return []
    return list(json.loads(dump).get("entries", []))


def _gather(report: RankReport, info: RankInfo) -> list[RankReport] | None:
    """Every rank's report on rank 0 (None elsewhere)."""
    if info.world_size == 1:
        return [report]
    reports: list[Any] | None = [None] * info.world_size if info.rank == 0 else None
    dist.gather_object(report, reports, dst=0)
    return reports
