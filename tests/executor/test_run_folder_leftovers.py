"""What a run folder keeps across runs and interruptions (`executor.run_folder`): an earlier
run's measurement is removed before a new run writes its own, and an interrupted run's
``metrics.json`` keeps the steps every rank finished and names the signal."""

from __future__ import annotations

import json
from pathlib import Path

from executor.run_config import RunConfig
from executor.run_folder import StepLog, clear_previous_run, write_failed_run
from launch.failures import LaunchInterrupted
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset


def _bundle(dp: int) -> PlanBundle:
    return PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu", num_gpus=dp),
        job=TrainingJob(seq_length=32, global_batch_size=4, precision="fp32"),
        plan=ParallelPlan(dp=dp),
    )


def _earlier_run(folder: Path, bundle: PlanBundle) -> None:
    """The files a completed 4-rank run leaves, with a report beside them."""
    (folder / "plan.json").write_text(serde.dumps(bundle))
    for name in ("metrics.json", "measured.json", "estimate.json", "predicted.json"):
        (folder / name).write_text("{}")
    (folder / "candidates.json").write_text("[]")
    for rank in range(4):
        StepLog(folder, rank).append(step=0, time_s=1.0, loss=5.0, phase="measured")
        (folder / "traces").mkdir(exist_ok=True)
        (folder / "traces" / f"rank{rank}.json").write_text("{}")


def test_an_earlier_run_of_another_plan_leaves_nothing_a_new_run_would_be_read_with(
    tmp_path: Path,
) -> None:
    _earlier_run(tmp_path, _bundle(4))
    removed = clear_previous_run(tmp_path, _bundle(2))
    assert set(removed) == {
        "metrics.json",
        "measured.json",
        "steps",
        "traces",
        "estimate.json",
        "predicted.json",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["candidates.json", "plan.json"]


def test_an_earlier_run_of_the_same_plan_keeps_the_plans_prediction(tmp_path: Path) -> None:
    _earlier_run(tmp_path, _bundle(2))
    removed = clear_previous_run(tmp_path, _bundle(2))
    assert set(removed) == {"metrics.json", "measured.json", "steps", "traces"}
    assert (tmp_path / "estimate.json").is_file() and (tmp_path / "predicted.json").is_file()


def test_a_plan_folder_that_never_ran_is_left_as_it_is(tmp_path: Path) -> None:
    # `paraplan plan --out DIR` then `paraplan execute DIR/plan.json --out DIR`
    (tmp_path / "plan.json").write_text(serde.dumps(_bundle(4)))
    (tmp_path / "estimate.json").write_text("{}")
    assert clear_previous_run(tmp_path, _bundle(2)) == ()
    assert (tmp_path / "estimate.json").is_file()


def test_a_stale_rank_log_is_not_counted_in_a_later_failed_run(tmp_path: Path) -> None:
    _earlier_run(tmp_path, _bundle(4))
    clear_previous_run(tmp_path, _bundle(2))
    for rank in range(2):
        log = StepLog(tmp_path, rank)
        log.append(step=0, time_s=0.5, loss=6.0, phase="measured")
        log.append(step=1, time_s=0.25 + rank, loss=5.5, phase="measured")
    config = RunConfig(bundle=_bundle(2), out_dir=str(tmp_path), steps=10, warmup=0)
    write_failed_run(config, LaunchInterrupted("SIGTERM"), first_step=0)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["iteration_time_s"] == [0.5, 1.25]  # the slowest of the 2 ranks
    assert metrics["world_size"] == 2


def test_an_interrupted_run_keeps_the_steps_every_rank_finished(tmp_path: Path) -> None:
    logs = [StepLog(tmp_path, rank) for rank in range(2)]
    for step in range(3):
        logs[0].append(
            step=step, time_s=0.1, loss=6.0 - step, phase="warmup" if step == 0 else "measured"
        )
    logs[1].append(step=0, time_s=0.2, loss=6.0, phase="warmup")
    logs[1].append(step=1, time_s=0.3, loss=5.0, phase="measured")
    config = RunConfig(bundle=_bundle(2), out_dir=str(tmp_path), steps=10, warmup=1)
    write_failed_run(config, LaunchInterrupted("SIGINT"), first_step=0)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "failed"
    assert metrics["failure"] == {
        "rank": None,
        "error_type": "Interrupted",
        "signal": "SIGINT",
        "cause": "interrupted by SIGINT (Ctrl-C); the launcher stopped every rank",
        "context": [],
        "log": "failure.log",
    }
    assert (metrics["steps"], metrics["iteration_time_s"], metrics["next_step"]) == ([1], [0.3], 2)
    assert (tmp_path / "failure.log").read_text().startswith("interrupted by SIGINT")
