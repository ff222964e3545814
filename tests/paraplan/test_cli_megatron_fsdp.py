"""Megatron-FSDP on the command line (estimate, check flags) and in `export --to megatron`;
the Megatron-FSDP recipes Llama3-8B on 8 H100 and Qwen3-235B-A22B on 256 H100."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.commands import estimate, plan
from planner.export import megatron_arguments, megatron_environment
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)
    code = estimate.run(parser.parse_args([*argv, "--json"]))
    return code, json.loads(capsys.readouterr().out)


LLAMA3_8B_8_H100 = [
    "--model", "llama3-8b", "--hardware", "h100-sxm-80gb", "--num-gpus", "8",
    "--seq-len", "8192", "--global-batch", "128", "--mbs", "1",
]  # fmt: skip
QWEN3_235B_256_H100 = [
    "--model", "qwen3-235b-a22b", "--hardware", "h100-sxm-80gb", "--num-gpus", "256",
    "--seq-len", "4096", "--global-batch", "2048", "--mbs", "1", "--ep", "32", "--etp", "1",
    "--recompute", "full",
]  # fmt: skip


def test_llama3_8b_on_8_h100_fits_only_with_megatron_fsdp(capsys) -> None:
    code, fsdp = run(capsys, *LLAMA3_8B_8_H100, "--use-megatron-fsdp")
    assert code == 0 and fsdp["fits"]
    _, distopt = run(capsys, *LLAMA3_8B_8_H100, "--dist-opt")
    assert fsdp["peak_memory_gib"] < distopt["peak_memory_gib"]


def test_qwen3_235b_on_256_h100_with_megatron_fsdp_fits(capsys) -> None:
    code, out = run(capsys, *QWEN3_235B_256_H100, "--use-megatron-fsdp")
    assert code == 0 and out["fits"]
    assert out["iteration_time_s"] > 0


def test_strategy_flag_reaches_the_plan(capsys) -> None:
    _, grads = run(
        capsys, *LLAMA3_8B_8_H100, "--use-megatron-fsdp",
        "--data-parallel-sharding-strategy", "optim_grads",
    )  # fmt: skip
    _, params = run(capsys, *LLAMA3_8B_8_H100, "--use-megatron-fsdp")
    assert grads["peak_memory_gib"] > params["peak_memory_gib"]


def test_export_carries_megatron_fsdp_flags() -> None:
    bundle = PlanBundle(
        model=get_preset("llama3-8b"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=16),
        job=TrainingJob(seq_length=8192, global_batch_size=128),
        plan=ParallelPlan(
            tp=2, dp=8, use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads"
        ),
    )
    args = megatron_arguments(bundle)
    assert "--use-megatron-fsdp" in args
    i = args.index("--data-parallel-sharding-strategy")
    assert args[i + 1] == "optim_grads"
    assert args[args.index("--ckpt-format") + 1] == "fsdp_dtensor"
    assert "--use-distributed-optimizer" not in args
    # Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1, even with tp > 1
    assert megatron_environment(bundle) == {}


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    parser = argparse.ArgumentParser(prog="paraplan plan")
    plan.add_arguments(parser)
    code = plan.run(parser.parse_args([*argv, "--json"]))
    return code, json.loads(capsys.readouterr().out)


SMALL_PLAN = [
    "--model", "tiny", "--hardware", "h100-sxm-80gb", "--num-gpus", "8",
    "--seq-len", "512", "--global-batch", "32", "--tp", "1", "--pp", "1", "--top", "3",
]  # fmt: skip


@pytest.mark.parametrize("strategy", ["optim", "optim_grads", "optim_grads_params"])
def test_plan_pins_the_sharding_strategy(capsys, strategy: str) -> None:
    code, out = _plan(capsys, *SMALL_PLAN, "--data-parallel-sharding-strategy", strategy)
    assert code == 0 and out["top"]
    for entry in out["top"]:
        assert entry["use_megatron_fsdp"] and not entry["distributed_optimizer"]
        assert entry["data_parallel_sharding_strategy"] == strategy


def test_plan_pins_megatron_fsdp_on_and_off(capsys) -> None:
    code, on = _plan(capsys, *SMALL_PLAN, "--use-megatron-fsdp")
    assert code == 0 and all(e["use_megatron_fsdp"] for e in on["top"])
    code, off = _plan(capsys, *SMALL_PLAN, "--no-use-megatron-fsdp")
    assert code == 0 and not any(e["use_megatron_fsdp"] for e in off["top"])
