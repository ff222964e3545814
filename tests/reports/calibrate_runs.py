"""Runs the calibration tests fit (`tests/reports/test_calibrate*.py`): the stored profile of
a 2-core CPU VM they start from (``data/cpu-quick-tiny.json``, written by ``paraplan
profile --quick --nproc 2 --model tiny``; command, date, host and torch version are in its
provenance), the tiny model's bundle on it, and synthetic run folders whose "measured"
timeline is the cost model's prediction on another profile, and hand-made runs of measured
collective calls."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from costmodel.estimate import estimate_to_json, simulate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import TORCH_OPTIONS
from profiles.schema import HardwareProfile
from reports.run_dir import RunDir, load_run
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.timeline import Timeline, TimelineEvent

PROFILE = Path(__file__).parent / "data" / "cpu-quick-tiny.json"


def tiny_bundle(plan: ParallelPlan, *, seq: int = 128, batch: int = 8) -> PlanBundle:
    return PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware=str(PROFILE), num_gpus=plan.world_size, gpus_per_node=2),
        job=TrainingJob(seq_length=seq, global_batch_size=batch, precision="fp32"),
        plan=plan,
    )


def synthetic_run(
    folder: Path,
    bundle: PlanBundle,
    base: HardwareProfile,
    truth: HardwareProfile,
    options: ExecutionOptions = TORCH_OPTIONS,
) -> RunDir:
    """A run folder whose measurement is the prediction on ``truth`` (``options``: the
    framework model, as in `simulate_plan`)."""
    folder.mkdir(parents=True)
    b = bundle
    estimate, predicted = simulate_plan(b.model, b.cluster, b.job, b.plan, base, options=options)
    actual, measured = simulate_plan(b.model, b.cluster, b.job, b.plan, truth, options=options)
    assert predicted is not None and measured is not None
    (folder / "plan.json").write_text(serde.dumps(b))
    (folder / "estimate.json").write_text(json.dumps(estimate_to_json(estimate)))
    (folder / "predicted.json").write_text(serde.dumps(predicted))
    (folder / "measured.json").write_text(
        serde.dumps(dataclasses.replace(measured, source="measured"))
    )
    steps = [actual.iteration_time_s] * 4
    (folder / "metrics.json").write_text(json.dumps({"iteration_time_s": steps}))
    return load_run(folder)


def dp_all_reduce_call(rank: int, start: float, seconds: float, size: int) -> TimelineEvent:
    """A measured data-parallel all-reduce of ``size`` bytes on ``rank``."""
    return TimelineEvent(
        rank=rank,
        lane="dp",
        name="dp all_reduce",
        kind="all_reduce",
        start_s=start,
        duration_s=seconds,
        bytes=size,
        group="dp-cp",
    )


def hand_made_run(events: list[TimelineEvent]) -> RunDir:
    """A run folder of the tiny model on dp 2 whose measured timeline holds ``events``."""
    bundle = tiny_bundle(ParallelPlan(dp=2))
    empty = Timeline(source="predicted")
    measured = Timeline(source="measured", events=tuple(events), iteration_time_s=1.0)
    return RunDir(
        path=Path("hand-made"),
        bundle=bundle,
        estimate={},
        predicted=empty,
        measured=measured,
        metrics=None,
        candidates=None,
    )
