"""The optimizer CPU offload flags (`paraplan.optimizer_args`): Megatron-LM's names set the
`ExecutionOptions` fields, combinations Megatron-core refuses or ignores are refused with the
fix, and `estimate` and `plan` take them."""

from __future__ import annotations

import argparse
import json

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.optimizer_offload import OFFLOAD_RULE
from costmodel.optimizer_state import PRECISION_AWARE_RULE
from paraplan.cli import main
from paraplan.recipe_args import options_from_args
from specs.errors import SpecError
from tests.paraplan.cli_helpers import parse_estimate

BASE = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096", "--global-batch", "64"]
PLAN = ["--tp", "1", "--pp", "1", "--dist-opt"]
OFFLOAD = ("--use-precision-aware-optimizer", "--optimizer-cpu-offload")


def estimate_args(*argv: str) -> argparse.Namespace:
    return parse_estimate(BASE, *argv)


@pytest.mark.parametrize(
    ("argv", "fraction", "overlap"),
    [
        (OFFLOAD, 1.0, False),
        ((*OFFLOAD, "--optimizer-offload-fraction", "0.5"), 0.5, False),
        ((*OFFLOAD, "--overlap-cpu-optimizer-d2h-h2d"), 1.0, True),
    ],
)
def test_flags_set_the_offload_fields(argv, fraction, overlap):
    options = options_from_args(estimate_args(*argv))
    assert options.optimizer_cpu_offload_fraction == fraction
    assert options.overlap_cpu_optimizer_d2h_h2d is overlap
    assert options_from_args(estimate_args()) == DEFAULT_OPTIONS


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("--optimizer-offload-fraction", "0.5"), "--optimizer-offload-fraction set how"),
        (("--overlap-cpu-optimizer-d2h-h2d",), "--overlap-cpu-optimizer-d2h-h2d set how"),
        ((*OFFLOAD, "--optimizer-offload-fraction", "2"), r"in \[0, 1\]"),
        ((*OFFLOAD, "--runtime", "torch"), "the torch runtime has none"),
        (
            ("--optimizer-cpu-offload",),
            "needs the precision-aware optimizer .* give --use-precision-aware-optimizer",
        ),
    ],
)
def test_refused_combinations_name_the_fix(argv, match):
    with pytest.raises(SpecError, match=match):
        options_from_args(estimate_args(*argv))


def test_refused_combination_exits_2(capsys):
    assert main(["estimate", *BASE, *PLAN, "--overlap-cpu-optimizer-d2h-h2d"]) == 2
    assert "add --optimizer-cpu-offload" in capsys.readouterr().err


def test_offload_without_the_precision_aware_optimizer_exits_2(capsys):
    # Megatron-LM arguments.py: the offload "must be used in conjunction with
    # `--use-precision-aware-optimizer`"
    assert main(["estimate", *BASE, *PLAN, "--optimizer-cpu-offload"]) == 2
    err = capsys.readouterr().err
    assert "optimizer CPU offload needs the precision-aware optimizer" in err
    assert "optimizer_cpu_offload_fraction 1.0 with precision_aware_optimizer False" in err
    assert "give --use-precision-aware-optimizer, or drop --optimizer-cpu-offload" in err
    assert "Traceback" not in err


def test_estimate_without_the_distributed_optimizer_is_one_plan_violation(capsys):
    # the precision-aware optimizer's rule covers the offload's: reported once
    assert main(["estimate", *BASE, "--tp", "1", *OFFLOAD]) == 1
    out = capsys.readouterr().out
    assert PRECISION_AWARE_RULE in out and OFFLOAD_RULE not in out


def test_offload_lowers_peak_memory_and_lengthens_the_step(capsys):
    runs = {}
    for name, extra in (("base", []), ("offload", [*OFFLOAD])):
        assert main(["estimate", *BASE, *PLAN, *extra, "--json"]) == 0
        runs[name] = json.loads(capsys.readouterr().out)
    # 12 bytes of each of the 8,030,261,248 parameters over dp 8 leave the device
    moved = runs["base"]["peak_memory_gib"] - runs["offload"]["peak_memory_gib"]
    assert moved == pytest.approx(12 * 8_030_261_248 / 8 / 2**30, rel=1e-9)
    assert runs["offload"]["breakdown"]["optimizer"] > runs["base"]["breakdown"]["optimizer"]


def test_plan_searches_distributed_optimizer_plans_only(capsys):
    base = ["plan", "--model", "tiny", "--num-gpus", "4", "--seq-len", "512"]
    base += ["--global-batch", "8", *OFFLOAD, "--json"]
    assert main(base) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert top and all(plan["distributed_optimizer"] for plan in top)
    assert main([*base, "--no-dist-opt"]) == 2
    assert "needs the distributed optimizer" in capsys.readouterr().err


def test_table_form_names_the_offloaded_share(capsys):
    argv = ["estimate", *BASE, *PLAN, *OFFLOAD, "--optimizer-offload-fraction"]
    assert main([*argv, "0.5"]) == 0
    assert "50.0% of each rank's optimizer state" in capsys.readouterr().out
    assert main(["estimate", *BASE, *PLAN]) == 0
    assert "optimizer state" not in capsys.readouterr().out


def test_table_form_says_the_offloaded_state_stays_fp32(capsys):
    moments = ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    assert main(["estimate", *BASE, *PLAN, *OFFLOAD, *moments]) == 0
    out = capsys.readouterr().out
    assert "fp32 Adam state (master weights, both moments) on the device and the host" in out
    assert main(["estimate", *BASE, *PLAN, "--use-precision-aware-optimizer", *moments]) == 0
    assert "bf16 first and bf16 second moments" in capsys.readouterr().out
