"""`paraplan execute`: flags, exit codes and output (the command module, parsed as the CLI
parses it)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pytest

from costmodel.estimate import simulate_plan
from executor.data import write_indexed_dataset
from launch.failures import LaunchError, RankFailure, died
from paraplan.commands import execute as command
from profiles.store import load_profile
from reports.run_dir import load_run
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.formats import percent
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="paraplan execute")
    command.add_arguments(parser)
    return command.run(parser.parse_args(list(argv)))


def _bundle(**plan: object) -> PlanBundle:
    spec = ParallelPlan(**plan)  # type: ignore[arg-type]
    return PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="cpu", num_gpus=spec.world_size),
        job=TrainingJob(seq_length=32, global_batch_size=4, precision="fp32"),
        plan=spec,
    )


def _plan_file(tmp_path: Path, name: str = "plan.json", **plan: object) -> str:
    path = tmp_path / name
    path.write_text(serde.dumps(_bundle(**plan)))
    return str(path)


def test_command_module_shape() -> None:
    assert command.NAME == "execute" and command.HELP
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["p.json"])
    assert (args.steps, args.warmup, args.out, args.seed) == (10, 2, "run", 0)
    assert args.data is args.save is args.resume is args.peak_tflops is args.hardware is None
    assert args.save_interval is args.keep is None and args.verbose is False


def test_invalid_plan_prints_violations_and_exits_1(tmp_path: Path, capsys) -> None:
    plan = _plan_file(tmp_path, tp=3)  # 4 heads over 3 ranks
    assert _run(plan, "--out", str(tmp_path / "run")) == 1
    out = capsys.readouterr().out
    assert "nothing was started" in out and "[heads_divisible_by_tp]" in out
    assert not (tmp_path / "run").exists()


def test_bad_input_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(SpecError, match="malformed JSON"):
        _run(str(tmp_path / "broken.json"))
    plan = _plan_file(tmp_path)
    with pytest.raises(SpecError, match="no such file"):
        _run(plan, "--data", str(tmp_path / "absent.txt"))
    with pytest.raises(SpecError, match="--peak-tflops must be > 0"):
        _run(plan, "--peak-tflops", "0")
    with pytest.raises(SpecError, match="unknown hardware profile 'h999'"):
        _run(plan, "--hardware", "h999")


@pytest.mark.slow
def test_text_data_run_with_mfu_then_checked_resume(tmp_path: Path, capsys) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    plan = _plan_file(tmp_path)
    out, ckpt = tmp_path / "run", tmp_path / "ckpt"
    argv = [plan, "--steps", "2", "--warmup", "0", "--data", str(text), "--out", str(out)]
    hardware = ["--hardware", "h100-sxm-80gb", "--peak-tflops", "0.05"]
    assert _run(*argv, "--save", str(ckpt), *hardware) == 0
    printed = capsys.readouterr().out
    assert "loss:" in printed and "tokens/s, MFU" in printed
    assert "next step (for --resume): 2" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    if "host_steal_timed" in metrics:  # a Linux kernel: the share the hypervisor took
        share = metrics["host_steal_timed"]
        assert f"CPU stolen by the hypervisor during the timed steps: {share:.2%}" in printed
    assert metrics["mfu"] is not None and metrics["mfu"] > 0
    # the summary prints MFU as every command does: a percentage with one decimal
    assert f"tokens/s, MFU {percent(metrics['mfu'])}\n" in printed
    assert metrics["peak_flops_per_rank"] == pytest.approx(0.05e12)
    assert metrics["model_flops_per_iteration"] > 0
    # The cost model's view of the same plan sits beside the measurement, for the report.
    run_dir = load_run(out)
    assert run_dir.predicted.source == "predicted" and run_dir.measured is not None
    assert run_dir.estimate["iteration_time_s"] > 0
    assert run_dir.bundle == serde.load(PlanBundle, plan)
    with pytest.raises(SpecError, match="saved with seed 0, this run has 3"):
        _run(*argv, "--resume", str(ckpt), "--seed", "3")


def test_host_probe_after_unprofiled_steps(tmp_path: Path) -> None:
    plan, out = _plan_file(tmp_path), tmp_path / "run"
    with pytest.raises(SpecError, match="all 2 measured steps are profiled"):
        _run(plan, "--steps", "2", "--host-probe", "--out", str(out))
    assert _run(plan, "--steps", "3", "--warmup", "0", "--host-probe", "--out", str(out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["host_probe_s"]) == 1 and metrics["host_probe_p50_s"] > 0


@pytest.mark.slow
def test_a_failing_rank_ends_the_job_with_its_error(tmp_path: Path, capsys) -> None:
    # Rank 1 reads samples 2-3 of step 0; a token id of 900 >= vocab 512 sits in sample 3.
    docs = [list(range(1, 200))]  # 6 windows of 33 tokens
    docs[0][3 * 32 + 5] = 900
    write_indexed_dataset(tmp_path / "d", docs, dtype=np.int32)
    plan = _plan_file(tmp_path, dp=2)
    start = time.monotonic()
    data, out = str(tmp_path / "d"), str(tmp_path / "run")
    code = _run(plan, "--steps", "1", "--warmup", "0", "--data", data, "--out", out)
    assert time.monotonic() - start < 60  # the default process-group timeout
    assert code == 2  # the rank's error is a SpecError: bad input
    # progress lines (stderr is not a terminal) may come first, then the error
    err = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("progress: ")]
    assert err[0].startswith("paraplan execute: error: rank 1: SpecError:")
    assert "token id 900" in err[0]
    assert f"  tracebacks: {out}/failure.log (or run with --verbose)" in err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["loss"] == []


def _failed_args(*, verbose: bool) -> argparse.Namespace:
    """The flags `report_failure` reads, of a run folder ``RUN`` without checkpoints."""
    return argparse.Namespace(out="RUN", save=None, verbose=verbose)


def test_failure_report_puts_the_cause_first_and_tracebacks_behind_verbose(capsys) -> None:
    dead = died(1, -9, 2.0)
    reset = RankFailure(
        rank=0,
        error_type="RuntimeError",
        message="Connection reset by peer",
        traceback="TB0",
        time_s=1.0,
    )
    err = LaunchError((reset, dead))
    command.report_failure(err, _bundle(), None, _failed_args(verbose=False))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "paraplan execute: error: rank 1 killed by signal 9 (SIGKILL); " + (
        "the kernel's out-of-memory killer or a user sends it"
    )
    assert lines[1].startswith("  then rank 0: RuntimeError: Connection reset by peer")
    assert "TB0" not in "\n".join(lines)
    command.report_failure(err, _bundle(), None, _failed_args(verbose=True))
    assert "TB0" in capsys.readouterr().err


def test_out_of_memory_headline_adds_the_predicted_peak(capsys) -> None:
    message = (
        "CUDA out of memory. Tried to allocate 2.10 GiB. GPU 0 has a total capacity of "
        "79.11 GiB of which 812.00 MiB is free. Including non-PyTorch memory, this process "
        "has 78.30 GiB memory in use."
    )
    oom = RankFailure(
        rank=0, error_type="OutOfMemoryError", message=message, traceback="", time_s=1.0
    )
    bundle, profile = _bundle(dp=2), load_profile("h100-sxm-80gb")
    estimate, _ = simulate_plan(bundle.model, bundle.cluster, bundle.job, bundle.plan, profile)
    command.report_failure(LaunchError((oom,)), bundle, profile, _failed_args(verbose=False))
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (
        "paraplan execute: error: rank 0: CUDA out of memory: tried to allocate 2.10 GiB with "
        f"78.30 GiB of 79.11 GiB in use; predicted peak {estimate.peak_memory_gib:.1f} GiB"
    )
