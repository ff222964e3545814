"""The fidelity benchmark's plans and runs (`bench/fidelity.py`): the timing, coverage and
calibration suites, one run of a plan (execute, read its metrics) and a plan's row (its
middle run against the cost model's prediction); the rounds that run every plan its repeats
are in `fidelity_rounds`, the planner's pick in `fidelity_pick`.

bench/ is not a package: `bench/fidelity.py` imports this file as a sibling script does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from costmodel.estimate import estimate_to_json, simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from executor.run import RunConfig, execute
from profiles.host_probe import host_probe
from profiles.schema import HardwareProfile
from reports.fidelity import (
    FidelityRow,
    median_run,
    repeat_spread,
)
from reports.host_speed import host_typical
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.loading import load_model
from specs.plan import ParallelPlan

T = TypeVar("T")

SEQ_LENGTH = 128
GLOBAL_BATCH = 8
PICK_CASE = "dp2"
"""The planner searches the problem (model, world, job) of this case."""
MAX_FAILED_RUNS = 2
"""Failed runs after which a plan is not run again (`fidelity_rounds.measure_rounds`)."""
STEAL_LIMIT = 0.005
"""Share of the machine's CPU time the hypervisor may take during a run's timed steps
(metrics ``host_steal_timed``) before the run is set aside and the plan runs again
(`fidelity_rounds.measure_rounds`). On a virtual machine a stolen slice stops one rank
while its peer waits in a collective, so a little steal costs a collective-bound plan far
more than the stolen share."""
MAX_SET_ASIDE = 2
"""Runs of one plan set aside for steal; a further stolen run counts as measured."""
SMALL_BUCKET = 100_000
"""DDP bucket (parameters) small enough to split the tiny model's 0.7M gradients in ~8."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """One plan of the suite."""

    name: str
    """Unique short name."""
    model: str
    """Model preset."""
    plan: ParallelPlan
    """The plan (its degrees give the world size)."""
    covers: tuple[str, ...]
    """Features the plan exercises."""
    seq_length: int = SEQ_LENGTH
    """Tokens per sequence."""

    @property
    def group(self) -> str:
        """Model, world and job: plans of one group solve the same problem."""
        return f"{self.model} w{self.plan.world_size} seq{self.seq_length} gbs{GLOBAL_BATCH}"


def _p(**knobs: Any) -> ParallelPlan:
    return ParallelPlan(**knobs)


def timing_suite() -> tuple[Case, ...]:
    """World sizes 1 and 2: every feature the brief names, and three micro-batch sizes."""
    return (
        Case(name="w1-mbs2", model="tiny", plan=_p(micro_batch_size=2), covers=("mbs2",)),
        Case(name="dp2", model="tiny", plan=_p(dp=2), covers=("dp", "ddp")),
        Case(name="dp2-mbs4", model="tiny", plan=_p(dp=2, micro_batch_size=4), covers=("mbs4",)),
        Case(name="dp2-buckets", model="tiny", plan=_p(dp=2, ddp_bucket_size=SMALL_BUCKET),
             covers=("ddp-buckets",)),
        Case(name="dp2-overlap", model="tiny",
             plan=_p(dp=2, ddp_bucket_size=SMALL_BUCKET, overlap_grad_reduce=True),
             covers=("ddp-buckets", "overlap-grad-reduce")),
        Case(name="dp2-distopt", model="tiny", plan=_p(dp=2, distributed_optimizer=True),
             covers=("distributed-optimizer", "fsdp2")),
        Case(name="tp2", model="tiny", plan=_p(tp=2), covers=("tp",)),
        Case(name="tp2-sp", model="tiny", plan=_p(tp=2, sequence_parallel=True),
             covers=("tp", "sp")),
        Case(name="pp2-1f1b", model="tiny", plan=_p(pp=2), covers=("pp-1f1b",)),
        Case(name="pp2-vpp2", model="tiny", plan=_p(pp=2, vpp=2, schedule="interleaved"),
             covers=("pp-interleaved",)),
        Case(name="cp2", model="tiny", plan=_p(cp=2), covers=("cp",)),
        Case(name="dp2-rc-sel", model="tiny", plan=_p(dp=2, recompute="selective"),
             covers=("recompute-selective",)),
        Case(name="dp2-rc-full", model="tiny", plan=_p(dp=2, recompute="full"),
             covers=("recompute-full",)),
        Case(name="moe-ep2", model="tiny-moe", plan=_p(dp=2, ep=2), covers=("moe", "ep")),
    )  # fmt: skip


def coverage_suite() -> tuple[Case, ...]:
    """World size 4: coverage of the wider layouts, not timing (on a 2-core machine four
    ranks measure contention as much as the plan)."""
    return (
        Case(name="w4-tp2-sp-dp2", model="tiny", plan=_p(tp=2, dp=2, sequence_parallel=True),
             covers=("tp", "sp", "dp")),
        Case(name="w4-pp2-vpp2-dp2", model="tiny",
             plan=_p(pp=2, vpp=2, dp=2, schedule="interleaved"), covers=("pp-interleaved", "dp")),
        Case(name="w4-cp2-dp2-distopt", model="tiny",
             plan=_p(cp=2, dp=2, distributed_optimizer=True), covers=("cp", "fsdp2")),
        Case(name="w4-moe-ep4", model="tiny-moe", plan=_p(dp=4, ep=4), covers=("moe", "ep")),
    )  # fmt: skip


CALIBRATION_CASES = (
    Case(name="cal-dp2-mbs2", model="tiny", plan=_p(dp=2, micro_batch_size=2), covers=()),
    Case(name="cal-pp2-mbs2", model="tiny", plan=_p(pp=2, micro_batch_size=2), covers=()),
    Case(name="cal-dp2-mbs2-rc-sel", model="tiny",
         plan=_p(dp=2, micro_batch_size=2, recompute="selective"), covers=()),
    Case(name="cal-tp2-mbs2", model="tiny", plan=_p(tp=2, micro_batch_size=2), covers=()),
    Case(name="cal-tp2-sp-mbs2", model="tiny",
         plan=_p(tp=2, micro_batch_size=2, sequence_parallel=True), covers=()),
    Case(name="cal-w1-mbs4", model="tiny", plan=_p(micro_batch_size=4), covers=()),
)  # fmt: skip
"""Runs the calibration fits on: the suite's job with plans the suite does not run, as a
team calibrates on a few short runs of the job it is about to size. Per world size with
a profile of its own: three of 2 ranks without layer collectives for the compute time
scale (several plans, because one plan's middle run moves between benches and the fitted
scale with it), all at micro-batch 2, the suite's common size. Two of 2 ranks with tensor
parallelism, without and with sequence parallelism, for the layer collectives' scale
(`reports.calibrate_layers`), which the profile's collective extras alone leave loose. One
of one rank, at micro-batch 4: one rank runs two threads, which its profile's loops gain
from and a training step does not, so the 2-rank fit does not carry over to it."""
REFERENCE_WORLD = 2
"""World size of the main calibration: its runs give the host-speed elasticity and its
fitted scales go to the world sizes without calibration runs of their own."""


def calibration_cases(world: int) -> tuple[Case, ...]:
    """The `CALIBRATION_CASES` of ``world`` ranks."""
    return tuple(c for c in CALIBRATION_CASES if c.plan.world_size == world)


class Run(NamedTuple):
    """One executed run of a plan."""

    seconds: float
    """Median timed iteration, seconds."""
    gib: float
    """Peak memory of the fullest rank, GiB."""
    probe_s: float | None
    """Median host probe of its timed steps (`profiles.host_probe`); None without one."""
    steal: float | None = None
    """Share of the machine's CPU time stolen during its timed steps (`specs.host`); None
    where the kernel does not report steal."""

    @property
    def disturbed(self) -> bool:
        """More than `STEAL_LIMIT` of the machine was stolen during the run."""
        return self.steal is not None and self.steal > STEAL_LIMIT


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """What every run of one bench invocation shares."""

    work: Path
    """Work folder (profiles, run folders)."""
    steps: int
    """Measured steps per run (the last two profiled, the rest timed)."""
    warmup: int
    """Unmeasured steps first."""
    precision: str
    """Job precision: fp32 on CPU ranks, bf16 on GPUs."""
    repeats: int = 1
    """Runs per plan; the measured iteration is that of the middle one (`typical`)."""
    draws: int = 1
    """Quick profiles per world size, spread over the rounds; plans are predicted on their
    median (`fidelity_profiles`)."""


def bundle_of(case: Case, hardware: str, precision: str) -> PlanBundle:
    """The case as a plan bundle on ``hardware`` (a profile path)."""
    job = TrainingJob(
        seq_length=case.seq_length, global_batch_size=GLOBAL_BATCH, precision=precision
    )
    cluster = ClusterSpec(hardware=hardware, num_gpus=case.plan.world_size)
    return PlanBundle(model=load_model(case.model), cluster=cluster, job=job, plan=case.plan)


def predict(
    bundle: PlanBundle, profile: HardwareProfile, out: Path | None = None
) -> tuple[float | None, float | None, str]:
    """(iteration s, peak GiB, note) of the cost model; writes estimate.json and
    predicted.json into ``out`` when given. A plan the model refuses gives (None, None, why)."""
    b = bundle
    try:
        est, timeline = simulate_plan(
            b.model,
            b.cluster,
            b.job,
            b.plan,
            profile,
            timeline=out is not None,
            options=TORCH_OPTIONS,
        )
    except SpecError as exc:
        return None, None, f"no prediction: {exc}"
    if out is not None:
        (out / "estimate.json").write_text(json.dumps(estimate_to_json(est), indent=2) + "\n")
        if timeline is not None:
            (out / "predicted.json").write_text(serde.dumps(timeline))
    return est.iteration_time_s, est.peak_memory_gib, ""


def measure(bundle: PlanBundle, out: Path, settings: Settings) -> Run:
    """An executed run's figures (the host probed after every timed step)."""
    execute(
        RunConfig(
            bundle=bundle,
            out_dir=str(out),
            steps=settings.steps,
            warmup=settings.warmup,
            host_probe=host_probe,
        )
    )
    metrics = json.loads((out / "metrics.json").read_text())
    return Run(
        seconds=float(metrics["iteration_time_p50_s"]),
        gib=float(max(metrics["peak_memory_gib"])),
        probe_s=metrics.get("host_probe_p50_s"),
        steal=metrics.get("host_steal_timed"),
    )


Profiles = dict[int, tuple[str, HardwareProfile]]
"""Ranks per machine -> (path, profile) measured with that many ranks: a plan is predicted
on the profile of its own world size (one rank runs every core's threads, two ranks one
thread each, `executor.context.fair_thread_count`)."""


def paths_of(profiles: Profiles) -> dict[int, str]:
    """Each world size's profile path."""
    return {world: path for world, (path, _) in profiles.items()}


def profile_for(profiles: Mapping[int, T], case: Case) -> T:
    """The (path, profile) a case is predicted on, the one measured with its world size, or
    its path alone from `paths_of`."""
    try:
        return profiles[case.plan.world_size]
    except KeyError:
        raise SpecError(
            f"{case.name} runs {case.plan.world_size} ranks but only profiles of "
            f"{sorted(profiles)} ranks were measured; profile that world size too"
        ) from None


def run_folder(settings: Settings, case: Case, repeat: int) -> Path:
    """``WORK/runs/<name>`` for the first run of a case, ``<name>.r<k>`` for repeat k."""
    return settings.work / "runs" / (case.name if repeat == 0 else f"{case.name}.r{repeat}")


def typical(runs: list[Run], elasticity: float | None = None) -> Run:
    """The middle run by its median step (`reports.fidelity.median_run`) of the plan's quiet
    runs (`quiet_indices`): the plan at the host's usual speed, neither in a fast nor in a
    slow spell. With an ``elasticity`` (`reports.host_speed.host_elasticity`), the middle
    one at one host speed instead (`reports.host_speed.host_typical`; every run must have
    probed)."""
    return runs[typical_index(runs, elasticity)]


def typical_index(runs: list[Run], elasticity: float | None = None) -> int:
    """Index of `typical`'s run in ``runs`` (its run folder, `run_folder`)."""
    quiet = quiet_indices(runs)
    seconds = [runs[i].seconds for i in quiet]
    if elasticity is None:
        return quiet[median_run(seconds)]
    probes = [runs[i].probe_s or 0.0 for i in quiet]
    return quiet[host_typical(seconds, probes, elasticity)]


def quiet_indices(runs: list[Run]) -> list[int]:
    """Indices of the runs the hypervisor left alone (not `Run.disturbed`), or of every run
    when it disturbed them all: a run kept once its plan's `MAX_SET_ASIDE` was spent counts
    only where the plan has no quiet one."""
    quiet = [i for i, r in enumerate(runs) if not r.disturbed]
    return quiet or list(range(len(runs)))


def quiet_runs(runs: list[Run]) -> list[Run]:
    """The runs of `quiet_indices`."""
    return [runs[i] for i in quiet_indices(runs)]


def drop_traces(folder: Path) -> None:
    """Remove a repeat run's profiler traces (tens of MiB per rank; a bench keeps every
    run's metrics, and the traces of each case's first run for its report)."""
    shutil.rmtree(folder / "traces", ignore_errors=True)


def knob_label(plan: ParallelPlan) -> str:
    """The plan's label with the gradient-bucket and overlap switches it leaves out."""
    parts = [plan.label()]
    if plan.ddp_bucket_size is not None:
        parts.append(f"bucket{plan.ddp_bucket_size // 1000}K")
    flags = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")
    parts += [f.replace("_", "-") for f in flags if getattr(plan, f)]
    return " ".join(parts)


def case_row(
    case: Case,
    profiles: Profiles,
    settings: Settings,
    runs: list[Run],
    note: str = "",
) -> FidelityRow:
    """The row of a measured case, predicted into its first run folder."""
    hardware, profile = profile_for(profiles, case)
    bundle = bundle_of(case, hardware, settings.precision)
    middle = typical(runs)
    predicted_s, predicted_gib, why = predict(bundle, profile, run_folder(settings, case, 0))
    return FidelityRow(
        runs=len(runs),
        repeat_spread=repeat_spread([r.seconds for r in runs]),
        host_probe_s=middle.probe_s,
        name=case.name,
        group=case.group,
        plan=knob_label(case.plan),
        covers=case.covers,
        world_size=case.plan.world_size,
        measured_time_s=middle.seconds,
        predicted_time_s=predicted_s,
        measured_memory_gib=runs[0].gib,
        predicted_memory_gib=predicted_gib,
        note="; ".join(n for n in (note, why) if n),
    )
