"""Fault injection on the training loop (tiny model, DP2 with the distributed optimizer,
2 gloo ranks): a rank killed with SIGKILL after the first checkpoint, and a rank killed
while a checkpoint is being written. Each run is compared with one uninterrupted run of the
same plan: the steps a failed run logged, and the steps a resumed run trains, must repeat
its losses bitwise.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.checkpoint import PARTIAL_PREFIX, latest_checkpoint
from executor.launch import LaunchError
from executor.run import RunConfig, execute
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

STEPS = 12
INTERVAL = 3
TIMEOUT_S = 30.0

pytestmark = pytest.mark.slow


def _bundle() -> PlanBundle:
    plan = ParallelPlan(dp=2, distributed_optimizer=True)
    return PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu", num_gpus=2),
        job=TrainingJob(seq_length=32, global_batch_size=4, precision="fp32"),
        plan=plan,
    )


def _config(out: Path, steps: int, **kw: object) -> RunConfig:
    return RunConfig(
        bundle=_bundle(),
        out_dir=str(out),
        steps=steps,
        warmup=0,
        profile_steps=0,
        timeout_s=TIMEOUT_S,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """Losses of steps 0..STEPS-1, uninterrupted."""
    summary = execute(_config(tmp_path_factory.mktemp("ref") / "run", STEPS))
    assert summary is not None
    return list(summary.loss)


class _Killer(threading.Thread):
    """Polls ``ready`` and SIGKILLs spawned rank 1 the moment it holds."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__(daemon=True)
        self.ready = ready
        self.killed_at: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            if self.ready():
                for child in multiprocessing.active_children():
                    if child.name == "paraplan-rank1" and child.pid:
                        os.kill(child.pid, signal.SIGKILL)
                        self.killed_at = time.monotonic()
                        return
            time.sleep(0.0005)


def _logged_steps(out: Path) -> int:
    path = out / "steps" / "rank1.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _run_and_kill(config: RunConfig, killer: _Killer) -> LaunchError:
    killer.start()
    try:
        with pytest.raises(LaunchError) as info:
            execute(config)
    finally:
        killer.done.set()
    return info.value


def _resume(root: Path, ckpt: Path, reference: list[float]) -> int:
    """Resume from the newest complete checkpoint; its steps must equal the reference's."""
    latest = latest_checkpoint(ckpt)
    assert latest is not None
    next_step = json.loads((latest / "paraplan_checkpoint.json").read_text())["next_step"]
    summary = execute(_config(root / "resumed", STEPS - next_step, resume_dir=str(ckpt)))
    assert summary is not None
    assert list(summary.loss) == reference[next_step:]  # bitwise
    return next_step


def test_sigkill_after_the_first_checkpoint_names_the_rank_and_resumes_exactly(
    tmp_path: Path, reference: list[float]
) -> None:
    kill_after = random.randint(INTERVAL + 2, STEPS - 2)  # steps logged by rank 1
    out, ckpt = tmp_path / "run", tmp_path / "ckpt"
    killer = _Killer(lambda: _logged_steps(out) >= kill_after)
    err = _run_and_kill(_config(out, STEPS, save_dir=str(ckpt), save_interval=INTERVAL), killer)
    assert killer.killed_at is not None, f"kill after {kill_after} steps never happened"
    assert time.monotonic() - killer.killed_at < TIMEOUT_S
    assert err.original.rank == 1 and err.original.signal == "SIGKILL"
    assert err.headline().startswith("rank 1 killed by signal 9 (SIGKILL)")
    # The partial run folder holds the steps that ran, equal to the uninterrupted run's.
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["failure"]["rank"] == 1
    assert metrics["failure"]["cause"] == err.headline()
    ran = len(metrics["loss"])
    assert kill_after - 1 <= ran <= kill_after + 1, (kill_after, ran)
    assert metrics["steps"] == list(range(ran))
    assert metrics["loss"] == reference[:ran]
    assert "---- rank 1: ProcessDied" in (out / "failure.log").read_text()
    next_step = _resume(tmp_path, ckpt, reference)
    assert next_step % INTERVAL == 0 and INTERVAL <= next_step <= ran


def test_a_kill_during_a_save_leaves_the_previous_checkpoint_loadable(
    tmp_path: Path, reference: list[float]
) -> None:
    out, ckpt = tmp_path / "run", tmp_path / "ckpt"
    second = f"{PARTIAL_PREFIX}step_{2 * INTERVAL:08d}"
    killer = _Killer(lambda: (ckpt / second).exists())
    _run_and_kill(_config(out, STEPS, save_dir=str(ckpt), save_interval=INTERVAL), killer)
    assert killer.killed_at is not None
    # The kill landed inside the save: the half-written checkpoint was never renamed.
    assert (ckpt / second).exists() and not (ckpt / second[len(PARTIAL_PREFIX) :]).exists()
    assert _resume(tmp_path, ckpt, reference) == INTERVAL
