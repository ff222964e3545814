"""Megatron-LM's precision-aware optimizer flags on the command line
(`paraplan.optimizer_args.add_optimizer_precision_args`): each sets its `ExecutionOptions` field,
Megatron-core's rules are refused with the fix, `estimate` prices the smaller state and
`plan` searches only sharded optimizers."""

from __future__ import annotations

import argparse
import json

import pytest

from costmodel.execution_derived import optimizer_precision
from costmodel.execution_presets import DEFAULT_OPTIONS
from paraplan.cli import main
from paraplan.commands import estimate
from paraplan.commands import plan as plan_command
from paraplan.recipe_args import options_from_args
from specs.errors import SpecError
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

BASE = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "64"]
AWARE = ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]


def estimate_args(*argv: str) -> argparse.Namespace:
    return parse_estimate(BASE, *argv)


def estimate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    return run_estimate_json(capsys, BASE, *argv)


@pytest.mark.parametrize(
    ("argv", "fields"),
    [
        (AWARE, {"precision_aware_optimizer": True, "exp_avg_dtype": "bf16"}),
        (
            ["--use-precision-aware-optimizer", "--exp-avg-sq-dtype", "fp8"],
            {"exp_avg_sq_dtype": "fp8", "exp_avg_dtype": "fp32"},
        ),
        (
            ["--use-precision-aware-optimizer", "--main-params-dtype", "fp16"],
            {"main_params_dtype": "fp16"},
        ),
        (
            ["--use-precision-aware-optimizer", "--main-grads-dtype", "bf16"],
            {"main_grad_bytes": 2},
        ),
        (
            ["--main-grads-dtype", "fp32"],
            {"main_grad_bytes": 4, "precision_aware_optimizer": False},
        ),
    ],
)
def test_each_flag_sets_its_option(argv, fields) -> None:
    options = options_from_args(estimate_args(*argv))
    assert {name: getattr(options, name) for name in fields} == fields


def test_without_the_flags_the_state_is_fp32() -> None:
    assert optimizer_precision(options_from_args(estimate_args())) == (
        optimizer_precision(DEFAULT_OPTIONS)
    )


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--exp-avg-dtype", "bf16"], "set precision_aware_optimizer"),
        (["--main-params-dtype", "fp16"], "set precision_aware_optimizer"),
        (["--main-grads-dtype", "bf16"], "needs --use-precision-aware-optimizer"),
    ],
)
def test_a_dtype_without_the_flag_is_refused_with_the_fix(argv, match) -> None:
    with pytest.raises(SpecError, match=match):
        options_from_args(estimate_args(*argv))


def test_a_refused_dtype_exits_2_with_one_line(capsys) -> None:
    assert main(["estimate", *BASE, "--exp-avg-dtype", "bf16"]) == 2
    err = capsys.readouterr().err
    assert "exp_avg_dtype bf16 needs the precision-aware optimizer" in err
    assert "Traceback" not in err


def test_bad_dtype_is_an_argparse_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["estimate", *BASE, "--main-params-dtype", "bf16"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_estimate_without_the_distributed_optimizer_lists_the_violation(capsys) -> None:
    assert estimate.run(estimate_args("--tp", "2", *AWARE)) == 1
    out = capsys.readouterr().out
    assert "[precision_aware_optimizer_needs_distributed_optimizer]" in out
    assert "add --dist-opt" in out


def test_estimate_prices_half_the_optimizer_state(capsys) -> None:
    plan = ["--tp", "2", "--dist-opt", "--overlap-grad-reduce"]
    default = estimate_json(capsys, *plan)
    aware = estimate_json(capsys, *plan, *AWARE)
    opt_default = default["memory"][0]["parts"]["optimizer"]
    opt_aware = aware["memory"][0]["parts"]["optimizer"]
    assert opt_aware == pytest.approx(opt_default / 2, rel=1e-3)
    assert aware["breakdown"]["optimizer"] != default["breakdown"]["optimizer"]


def test_estimate_names_the_state_in_its_memory_assumptions(capsys) -> None:
    assert estimate.run(estimate_args("--dist-opt", *AWARE)) == 0
    out = capsys.readouterr().out
    assert "precision-aware Adam state: bf16 first and bf16 second moments" in out


def test_plan_searches_only_sharded_optimizers(capsys) -> None:
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    argv = ["--model", "tiny", "--hardware", "h100-sxm-80gb", "--seq-len", "512"]
    argv += ["--global-batch", "8", "--num-gpus", "4", "--no-tp-comm-overlap", "--max-mbs", "2"]
    code = plan_command.run(parser.parse_args([*argv, *AWARE, "--top", "5", "--json"]))
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["top"]
    assert all(p["distributed_optimizer"] or p["use_megatron_fsdp"] for p in data["top"])
