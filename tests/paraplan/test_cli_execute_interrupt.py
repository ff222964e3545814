"""`paraplan execute` interrupted with Ctrl-C, through the command line's `main`: exit code
130, every rank stopped, the steps that ran kept in ``metrics.json``, the checkpoint to
resume from named, progress lines on a stderr that is not a terminal, and a report of the
interrupted run (2 gloo ranks, the tiny model)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from paraplan.cli import main
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

pytestmark = pytest.mark.slow

WAIT_S = 120.0
"""Longest wait for the first periodic checkpoint on a loaded 2-core machine."""


def _plan_file(folder: Path) -> Path:
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu", num_gpus=2),
        job=TrainingJob(seq_length=32, global_batch_size=4, precision="fp32"),
        plan=ParallelPlan(dp=2),
    )
    path = folder / "plan.json"
    path.write_text(serde.dumps(bundle))
    return path


def _ctrl_c_once(checkpoint: Path) -> threading.Thread:
    """Send SIGINT to this process (the launcher) once ``checkpoint`` is complete."""

    def send() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if checkpoint.is_dir():
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_stops_the_ranks_keeps_the_steps_and_names_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan, out, save = _plan_file(tmp_path), tmp_path / "run", tmp_path / "ckpt"
    sender = _ctrl_c_once(save / "step_00000002")
    code = main(
        [
            "execute",
            str(plan),
            "--steps",
            "2000",
            "--warmup",
            "0",
            "--out",
            str(out),
            "--save",
            str(save),
            "--save-interval",
            "2",
            "--keep",
            "1",
            "--hardware",
            "h100-sxm-80gb",
        ]
    )
    sender.join()
    err = capsys.readouterr().err
    assert code == 130, err
    assert multiprocessing.active_children() == []
    lines = [line for line in err.splitlines() if not line.startswith("progress: ")]
    assert lines[0] == (
        "paraplan execute: interrupted by SIGINT (Ctrl-C); the launcher stopped every rank"
    )
    assert "Traceback" not in err
    assert "progress: measured steps " in err  # stderr is not a terminal: plain lines
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed"
    assert (metrics["failure"]["error_type"], metrics["failure"]["signal"]) == (
        "Interrupted",
        "SIGINT",
    )
    ran = len(metrics["steps"])
    assert ran >= 2 and metrics["next_step"] == metrics["steps"][-1] + 1
    assert f"  steps that ran: {out / 'metrics.json'} (status: failed, {ran} measured steps)" in (
        lines
    )
    assert any(
        line.startswith(f"  to continue: the same command with --resume {save} (newest ")
        for line in lines
    )
    assert main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    assert (
        "the run failed: interrupted by SIGINT (Ctrl-C); the launcher stopped every rank "
        + (f"({ran} measured steps ran)")
        in report
    )
