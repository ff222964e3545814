"""The training loop of `paraplan execute`: launch, train, measure, write the run folder.

Order of a run (every rank runs `_rank_main`; rank 0 also writes the files):

1. before launch, in the calling process (`prepare`): the plan passes `check_plan`, the
   machine can host its world, the data source and a resumed checkpoint are valid, so bad
   input fails with a `SpecError` before any process starts;
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
6. save a checkpoint when asked; each rank reduces its trace to a small
   `executor.measure.RankTrace`, which rank 0 gathers and merges.

Run folder: ``plan.json`` (the PlanBundle), ``metrics.json``, ``measured.json`` (the
Timeline of the last profiled step), ``traces/rank{r}.json`` (raw Chrome traces).
``metrics.json`` keys: ``iteration_time_s`` (every measured step, the slowest rank's time),
``iteration_time_p50_s``, ``iteration_time_p95_s``, ``tokens_per_s``, ``mfu`` (null without
a peak or model FLOPs), ``loss`` and ``warmup_loss`` (per step), ``peak_memory_gib`` (per
rank), ``memory_source``, ``collectives`` (`executor.measure.collective_ledger`),
``profiled_steps`` (indices into ``iteration_time_s``), ``timed_steps`` (the indices the
statistics use), ``first_step``, ``tokens_per_iteration``, ``world_size``,
``model_flops_per_iteration`` and ``peak_flops_per_rank``; with `RunConfig.host_probe`
also ``host_probe_s`` and ``host_probe_p50_s``.

Peak memory: on CUDA the caching allocator's peak (``max_memory_allocated``). On CPU the
profiler's memory events, which count only what is allocated while a profiler runs: the
peak of a profiled window is the bytes of the tensors alive when it begins (weights,
buffers, gradients, optimizer state; `_live_bytes`) plus the highest allocator total the
profiler reports inside it. Two windows are watched: the first warmup step, which creates
the optimizer state and gradient buffers, and the trace window.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function

from executor.checkpoint import check_resumable, checkpoint_meta, load_checkpoint, save_checkpoint
from executor.data import DataSource, open_stream, rank_batch, resolve_data
from executor.launch import RankInfo, check_local_launch, launch, set_group_timeouts, under_torchrun
from executor.measure import (
    RankTrace,
    build_timeline,
    collective_ledger,
    group_labels,
    rank_trace,
    step_stats,
)
from specs import serde
from specs.bundle import PlanBundle
from specs.errors import SpecError
from specs.rules import require_valid_plan

GIB = 2**30


class Trainer(Protocol):
    """What the loop needs from an engine."""

    optimizer: torch.optim.Optimizer

    def train_step(self, tokens: torch.Tensor) -> Any:
        """One optimizer step on this data-parallel rank's tokens; returns an object with a
        ``loss`` (the global-batch mean, equal on every rank)."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class RankSetup:
    """One rank's engine and the facts the loop needs about its place in the plan."""

    trainer: Trainer
    """The engine."""
    parts: Mapping[str, nn.Module]
    """Model parts by a name that means the same weights in every run of the plan
    (``stage{i}``, the virtual pipeline stage), for checkpoints."""
    dp_rank: int
    """Data-parallel index: which slice of the global batch this rank reads."""
    dp_size: int
    """Data-parallel size."""
    group_labels: Mapping[str, Sequence[str]]
    """Process group name -> axis labels (``tp``, ``dp-cp``; `executor.measure.group_labels`),
    for the measurement."""
    context_parallel: bool = False
    """True when cp > 1 (point-to-point inside compute is then CP traffic)."""
    local_keys: Callable[[str], bool] | None = None
    """State-dict keys whose tensors differ between ranks of one name (see
    `executor.checkpoint.save_checkpoint`)."""
    local_tag: str = ""
    """This rank's tag for ``local_keys`` entries, e.g. ``ep1``."""


Setup = Callable[[PlanBundle, RankInfo, int], RankSetup]
"""Builds a rank's engine from (bundle, rank info, seed); must be a module-level function."""


PROBE_CALLS = 5
"""Host-probe calls after each unprofiled step (`RunConfig.host_probe`); their median counts."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """Everything `execute` needs."""

    bundle: PlanBundle
    """Model, cluster, job and plan."""
    out_dir: str
    """Run folder to write."""
    steps: int = 10
    """Measured steps."""
    warmup: int = 2
    """Unmeasured steps before them."""
    data: str | None = None
    """`--data`: a text file, a Megatron dataset prefix, or None for synthetic tokens."""
    seed: int = 0
    """Seed of the weights and of the synthetic stream."""
    save_dir: str | None = None
    """Checkpoint folder written after the last step; None to skip."""
    resume_dir: str | None = None
    """Checkpoint folder to continue from; None to start at step 0."""
    peak_flops_per_rank: float | None = None
    """Peak FLOP/s of one rank's device, for MFU; None leaves MFU null."""
    model_flops_per_iteration: float | None = None
    """Model FLOPs of one iteration over the whole job (the caller computes them)."""
    timeout_s: float = 60.0
    """Process-group timeout: a collective waiting longer than this raises."""
    profile_steps: int = 2
    """Measured steps (the last ones) run under the trace profiler."""
    setup: Setup | None = None
    """Engine builder; None means `engine_setup`."""
    host_probe: Callable[[], Callable[[], None]] | None = None
    """Builder of a fixed piece of host work (`profiles.host_probe.host_probe`; a
    module-level function, so it travels to spawned ranks). When set, every rank times
    `PROBE_CALLS` calls of it after each unprofiled step (outside the step's clock) and the
    ranks meet at a barrier, so the next step starts together: how fast the host ran during
    the run (``metrics.json`` ``host_probe_s``); None: no probe."""


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


@dataclass(frozen=True, kw_only=True, slots=True)
class _RankReport:
    rank: int
    times_s: tuple[float, ...]
    probe_s: tuple[float, ...]
    losses: tuple[float, ...]
    warmup_losses: tuple[float, ...]
    peak_memory_bytes: int
    trace: RankTrace


# ---- the calling process ---------------------------------------------------------------------


def prepare(config: RunConfig) -> DataSource:
    """Every check that can run before launch; returns the validated data source."""
    b = config.bundle
    require_valid_plan(b.model, b.cluster, b.job, b.plan)
    if config.steps < 1 or config.warmup < 0 or config.profile_steps < 0:
        raise SpecError(
            f"steps ({config.steps}) must be >= 1, warmup ({config.warmup}) and profile_steps "
            f"({config.profile_steps}) >= 0"
        )
    if config.host_probe is not None and config.steps <= config.profile_steps:
        raise SpecError(
            f"the host probe runs after unprofiled steps, and all {config.steps} measured steps "
            f"are profiled (profile_steps {config.profile_steps}); measure more steps"
        )
    if not under_torchrun(os.environ):
        check_local_launch(b.plan.world_size)
    source = resolve_data(config.data, vocab_size=b.model.vocab_size, seq_length=b.job.seq_length)
    if config.resume_dir is not None:
        check_resumable(config.resume_dir, bundle=b, seed=config.seed, data=source.describe())
    return source


def execute(config: RunConfig) -> RunSummary | None:
    """Run the plan and write the run folder; returns rank 0's summary (None on the other
    ranks of a torchrun job). Raises `SpecError` before launch, `LaunchError` if a rank fails.
    """
    source = prepare(config)
    results = launch(
        _rank_main,
        (config, source),
        world_size=config.bundle.plan.world_size,
        timeout_s=config.timeout_s,
    )
    return results.get(0)


# ---- every rank --------------------------------------------------------------------------------


def _rank_main(info: RankInfo, config: RunConfig, source: DataSource) -> RunSummary | None:
    device = torch.device(info.device)
    setup = (config.setup or engine_setup)(config.bundle, info, config.seed)
    set_group_timeouts(info.timeout_s)
    memory = _MemoryWatch(device)
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
    warmup_losses = []
    for i in range(config.warmup):
        tokens = batch(step)
        run = partial(_timed_step, setup.trainer, tokens, step, device)
        # The first step creates optimizer state and gradient buffers: watch its memory.
        warmup_losses.append((memory.profiled(setup, run) if i == 0 else run())[1])
        step += 1
    times, probes, losses, trace_json = _measured_steps(
        config, setup, batch, step, device, info, memory
    )
    step += config.steps
    if config.save_dir is not None:
        _save(config.save_dir, config, setup, source, step)
    report = _RankReport(
        rank=info.rank,
        times_s=tuple(times),
        probe_s=tuple(probes),
        losses=tuple(losses),
        warmup_losses=tuple(warmup_losses),
        peak_memory_bytes=memory.peak_bytes(),
        trace=rank_trace(
            trace_json,
            rank=info.rank,
            flight_records=_flight_records(),
            group_labels=setup.group_labels,
            context_parallel=setup.context_parallel,
        ),
    )
    reports = _gather(report, info)
    if reports is None:
        return None
    return _write_run(config, reports, first_step=first_step, next_step=step)


def _write_run(
    config: RunConfig, reports: list[_RankReport], *, first_step: int, next_step: int
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
        **_probe_metrics(reports),
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
    )


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
    directory: str, config: RunConfig, setup: RankSetup, source: DataSource, next_step: int
) -> None:
    save_checkpoint(
        directory,
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


def _measured_steps(
    config: RunConfig,
    setup: RankSetup,
    batch: Callable[[int], torch.Tensor],
    first: int,
    device: torch.device,
    info: RankInfo,
    memory: _MemoryWatch,
) -> tuple[list[float], list[float], dict[str, Any]]:
    """Time every measured step, profiling the last ones; returns times, host probes (each
    timed step's, with `RunConfig.host_probe`), losses and the Chrome trace (also written
    to ``traces/rank{r}.json``)."""
    times, probes, losses = [], [], []
    profiled_from = config.steps - min(config.profile_steps, config.steps)
    profiler = None
    probe = config.host_probe() if config.host_probe is not None else None
    for i in range(config.steps):
        if i == profiled_from:
            base_bytes = _live_bytes(setup)
            profiler = _trace_profiler(device)
            profiler.start()
        seconds, loss = _timed_step(setup.trainer, batch(first + i), first + i, device)
        times.append(seconds)
        losses.append(loss)
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
    return times, probes, losses, trace_json


def _probe_s(probe: Callable[[], None]) -> float:
    """Median wall seconds of `PROBE_CALLS` calls of the host probe."""
    samples = []
    for _ in range(PROBE_CALLS):
        start = time.perf_counter()
        probe()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _probe_metrics(reports: list[_RankReport]) -> dict[str, Any]:
    """``host_probe_s`` (per unprofiled step, the mean over the ranks) and its median
    ``host_probe_p50_s``; empty when the ranks did not probe."""
    if not reports[0].probe_s:
        return {}
    per_step = [
        statistics.fmean(r.probe_s[i] for r in reports) for i in range(len(reports[0].probe_s))
    ]
    return {"host_probe_s": per_step, "host_probe_p50_s": statistics.median(per_step)}


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


def _gather(report: _RankReport, info: RankInfo) -> list[_RankReport] | None:
    """Every rank's report on rank 0 (None elsewhere)."""
    if info.world_size == 1:
        return [report]
    reports: list[Any] | None = [None] * info.world_size if info.rank == 0 else None
    dist.gather_object(report, reports, dst=0)
    return reports


class _MemoryWatch:
    """Peak allocator memory of this rank (see the module doc)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak = 0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def profiled(self, setup: RankSetup, run: Callable[[], Any]) -> Any:
        """Run ``run()`` under a memory-recording profiler (CPU only) and note its peak."""
        if self.device.type == "cuda":
            return run()
        base = _live_bytes(setup)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as session:
            result = run()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            session.export_chrome_trace(f.name)
            self.note(base, json.loads(Path(f.name).read_text()))
        return result

    def note(self, base_bytes: int, trace_json: Mapping[str, Any]) -> None:
        """A profiled window that began with ``base_bytes`` of live tensors."""
        self.peak = max(self.peak, base_bytes + max(_memory_totals(trace_json), default=0))

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return self.peak


def _live_bytes(setup: RankSetup) -> int:
    """Bytes of this rank's weights, buffers, gradients and optimizer state (each storage
    once; DTensors by their local shard)."""
    tensors: list[torch.Tensor] = []
    for part in setup.parts.values():
        for param in part.parameters():
            tensors += [param] if param.grad is None else [param, param.grad]
        tensors += list(part.buffers())
    for state in setup.trainer.optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    storages = {}
    for t in tensors:
        storage = (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values()) + sum(_ddp_bucket_bytes(p) for p in setup.parts.values())


def _ddp_bucket_bytes(module: torch.nn.Module) -> int:
    """Bytes of a DDP module's gradient buckets: flat buffers its reducer allocates when it
    wraps the model, before any profiler window, and keeps for the whole run (DDP's own
    logging data, ``bucket_sizes`` in bytes); 0 for any other module."""
    if not isinstance(module, DistributedDataParallel):
        return 0
    sizes = str(module._get_ddp_logging_data().get("bucket_sizes", ""))
    return sum(int(size) for size in sizes.split(",") if size.strip())


def _memory_totals(trace_json: Mapping[str, Any]) -> list[int]:
    """The allocator total of every memory event of a profiled window, relative to the
    total when the window began.

    The CPU allocator's reported total is a process-wide counter of the blocks allocated
    while any profiler recorded memory, less those of them freed since: blocks allocated
    in an earlier window and still alive (gradients, optimizer state) stay in it, while
    `_live_bytes` already counts them. The window's own start, the first event's total
    less its signed size, is taken off.
    """
    events = [
        e for e in trace_json.get("traceEvents", []) if e.get("name") == "[memory]" and "args" in e
    ]
    if not events:
        return []
    events.sort(key=lambda e: e.get("ts", 0))
    first = events[0]["args"]
    start = int(first.get("Total Allocated", 0)) - int(first.get("Bytes", 0))
    return [int(e["args"].get("Total Allocated", 0)) - start for e in events]
