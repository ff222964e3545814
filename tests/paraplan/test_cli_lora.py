"""``--lora-rank``, ``--lora-alpha`` and ``--lora-targets`` on the command line: the job
they build, `estimate` and `plan` pricing and naming a LoRA job (table and JSON), and the
refusals (flags without a rank, the torch runtime, the executor, the exports)."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.cli import main
from paraplan.commands import estimate
from paraplan.commands import plan as plan_command
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.finetune import DEFAULT_LORA_TARGETS, LoraSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.serde import dumps
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

BASE = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "64"]
PLAN = ["--tp", "2", "--dist-opt"]
LORA = ["--lora-rank", "16", "--lora-targets", "linear_qkv,linear_fc2"]


def job_of(*argv: str) -> TrainingJob:
    from paraplan.args import job_from_args

    return job_from_args(parse_estimate(BASE, *argv))


def test_the_flags_build_the_jobs_lora_spec() -> None:
    assert job_of().lora is None
    assert job_of("--lora-rank", "8").lora == LoraSpec(
        rank=8, alpha=32, targets=DEFAULT_LORA_TARGETS
    )
    job = job_of(*LORA, "--lora-alpha", "64")
    assert job.lora == LoraSpec(rank=16, alpha=64, targets=("linear_qkv", "linear_fc2"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--lora-alpha", "16"],
        ["--lora-targets", "linear_qkv"],
        ["--lora-rank", "0"],
        ["--lora-rank", "8", "--lora-targets", "linear_q"],
    ],
)
def test_bad_lora_flags_exit_2_without_traceback(capsys, argv: list[str]) -> None:
    assert main(["estimate", *BASE, *PLAN, *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()


def test_estimate_prices_and_names_a_lora_job(capsys) -> None:
    full = run_estimate_json(capsys, BASE, *PLAN)
    tuned = run_estimate_json(capsys, BASE, *PLAN, *LORA)
    assert "lora" not in full
    assert tuned["lora"] == {"rank": 16, "alpha": 32, "targets": ["linear_qkv", "linear_fc2"]}
    for part in ("gradients", "optimizer"):
        assert tuned["memory"][0]["parts"][part] < full["memory"][0]["parts"][part] / 100
    assert tuned["iteration_time_s"] < full["iteration_time_s"]
    assert estimate.run(parse_estimate(BASE, *PLAN, *LORA)) == 0
    assert "job: LoRA r16 a32 linear_qkv,linear_fc2" in capsys.readouterr().out


def test_a_rule_of_a_lora_job_is_listed(capsys) -> None:
    argv = [*BASE, "--tp", "4", "--lora-rank", "6", "--lora-targets", "linear_qkv"]
    assert estimate.run(parse_estimate(argv)) == 1
    assert "[lora_rank_divisible_by_tp]" in capsys.readouterr().out


def test_torch_runtime_refuses_lora(capsys) -> None:
    code = main(["estimate", *BASE, *PLAN, *LORA, "--runtime", "torch"])
    err = capsys.readouterr().err
    assert code == 2 and "lora_not_in_executor" in err and "Traceback" not in err


def test_plan_searches_and_names_a_lora_job(capsys) -> None:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    argv = ["--model", "tiny", "--hardware", "h100-sxm-80gb", "--seq-len", "512"]
    argv += ["--global-batch", "8", "--num-gpus", "4", "--no-tp-comm-overlap", "--max-mbs", "2"]
    args = parser.parse_args([*argv, "--lora-rank", "8", "--top", "3", "--json"])
    assert plan_command.run(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"]["rank"] == 8 and data["top"]
    for p in data["top"]:
        assert p["lora"]["rank"] == 8 and not p["use_megatron_fsdp"]


def test_moe_lora_search_is_refused_with_the_rule(capsys) -> None:
    argv = ["plan", "--model", "tiny-moe", "--seq-len", "512", "--global-batch", "8"]
    assert main([*argv, "--num-gpus", "4", "--lora-rank", "8"]) == 2
    assert "lora_not_on_experts" in capsys.readouterr().err


def _lora_plan_file(tmp_path) -> str:
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=1),
        job=TrainingJob(seq_length=128, global_batch_size=2, lora=LoraSpec(rank=4)),
        plan=ParallelPlan.for_world(1),
    )
    path = tmp_path / "plan.json"
    path.write_text(dumps(bundle))
    return str(path)


def test_execute_and_export_refuse_a_lora_plan(tmp_path, capsys) -> None:
    path = _lora_plan_file(tmp_path)
    assert main(["execute", path, "--out", str(tmp_path / "run")]) == 2
    assert "lora_not_in_executor" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert main(["export", path, "--to", "megatron"]) == 2
    assert "peft = LoRA(dim=4" in capsys.readouterr().err
    assert main(["export", path, "--to", "torchtitan"]) == 2
    assert "torchtitan_has_no_lora" in capsys.readouterr().err
