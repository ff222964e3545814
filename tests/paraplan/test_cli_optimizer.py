"""``--optimizer`` on the command line: Megatron-LM's choices, Muon priced by `estimate`,
the rule against the distributed optimizer, the torch runtime's refusal, and `plan`
searching only plans Muon runs with."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.cli import main
from paraplan.commands import estimate
from paraplan.commands import plan as plan_command
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.serde import dumps
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

BASE = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "64"]
PLAN = ["--tp", "2"]


def test_default_is_adam_and_choices_are_megatron_lm_s() -> None:
    assert parse_estimate(BASE).optimizer == "adam"
    assert parse_estimate(BASE, "--optimizer", "dist_muon").optimizer == "dist_muon"


def test_unknown_optimizer_is_an_argparse_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["estimate", *BASE, "--optimizer", "sgd"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_estimate_prices_muon_state_and_step(capsys) -> None:
    adam = run_estimate_json(capsys, BASE, *PLAN)
    muon = run_estimate_json(capsys, BASE, *PLAN, "--optimizer", "muon")
    dist = run_estimate_json(capsys, BASE, *PLAN, "--optimizer", "dist_muon")
    part = [d["memory"][0]["parts"]["optimizer"] for d in (adam, muon, dist)]
    assert part[0] > part[1] > part[2]
    # dp = 8 / tp 2 = 4 ranks, whole parameters each: more than a quarter on the worst rank
    assert part[1] / 4 < part[2] < part[1]
    assert muon["breakdown"]["optimizer"] > adam["breakdown"]["optimizer"]


def test_estimate_with_dist_opt_lists_the_violation(capsys) -> None:
    assert estimate.run(parse_estimate(BASE, *PLAN, "--dist-opt", "--optimizer", "muon")) == 1
    out = capsys.readouterr().out
    assert "[muon_excludes_sharded_optimizer]" in out


def test_estimate_names_muon_in_its_memory_assumptions(capsys) -> None:
    assert estimate.run(parse_estimate(BASE, *PLAN, "--optimizer", "dist_muon")) == 0
    assert "Muon (--optimizer dist_muon)" in capsys.readouterr().out


def test_torch_runtime_refuses_muon_without_traceback(capsys) -> None:
    code = main(["estimate", *BASE, *PLAN, "--optimizer", "muon", "--runtime", "torch"])
    err = capsys.readouterr().err
    assert code == 2
    assert "optimizer (muon) needs the megatron runtime" in err
    assert "Traceback" not in err


def test_plan_searches_only_plans_muon_runs_with(capsys) -> None:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    argv = ["--model", "tiny", "--hardware", "h100-sxm-80gb", "--seq-len", "512"]
    argv += ["--global-batch", "8", "--num-gpus", "4", "--no-tp-comm-overlap", "--max-mbs", "2"]
    code = plan_command.run(
        parser.parse_args([*argv, "--optimizer", "muon", "--top", "5", "--json"])
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["top"]
    for p in data["top"]:
        assert not (p["distributed_optimizer"] or p["use_megatron_fsdp"])
        assert not (p["overlap_grad_reduce"] or p["overlap_param_gather"])


def test_execute_refuses_a_muon_plan(tmp_path, capsys) -> None:
    bundle = PlanBundle(
        model=get_preset("tiny"),
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=1),
        job=TrainingJob(seq_length=128, global_batch_size=2, optimizer="dist_muon"),
        plan=ParallelPlan.for_world(1),
    )
    path = tmp_path / "plan.json"
    path.write_text(dumps(bundle))
    assert main(["execute", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "paraplan's executor steps AdamW only" in err
    assert not (tmp_path / "run").exists()
