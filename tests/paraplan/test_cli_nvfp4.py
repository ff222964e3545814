"""`paraplan estimate --precision nvfp4`: priced on a Blackwell profile with the fitted fp4
rate factor named, refused on a device without FP4 tensor cores."""

from __future__ import annotations

import pytest

from costmodel.fitted_rates import FP4_GEMM_RATE_FACTORS
from paraplan.cli import main

BASE = ["estimate", "--model", "llama3-70b", "--num-gpus", "64", "--seq-len", "8192"]
PLAN = ["--global-batch", "128", "--tp", "4", "--pp", "4", "--precision", "nvfp4"]


def test_estimate_nvfp4_on_gb300_prints_the_fitted_fp4_factor(capsys) -> None:
    assert main([*BASE, *PLAN, "--hardware", "gb300-nvl72"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if "NVFP4 GEMMs at" in s)
    factor = FP4_GEMM_RATE_FACTORS["blackwell_ultra"]
    assert f"{factor:g} of the profile's fp4 rate (fitted for blackwell_ultra)" in line
    assert "NVFP4 parameters (--fp4-param-gather" in out


def test_estimate_nvfp4_on_h100_exits_2_with_the_rule(capsys) -> None:
    assert main([*BASE, *PLAN, "--hardware", "h100-sxm-80gb"]) == 2
    err = capsys.readouterr().err
    assert "[nvfp4_needs_fp4_tensor_cores]" in err and "Traceback" not in err
    assert "use --precision fp8 or a Blackwell profile" in err


@pytest.mark.parametrize(
    ("command", "hardware", "other"),
    [
        ("check", "h100-sxm-80gb", "fp8"),
        ("plan", "h100-sxm-80gb", "fp8"),
        ("plan", "a100-sxm-80gb", "bf16"),  # no FP8 either: fp8 is no fix there
    ],
)
def test_check_and_plan_refuse_nvfp4_without_fp4_tensor_cores(
    capsys, command: str, hardware: str, other: str
) -> None:
    # `check` called the plan valid and `plan` failed on the profile's missing fp4 GEMM
    # curve, naming neither the rule nor a Blackwell profile
    degrees = ["--tp", "4", "--pp", "4"] if command == "check" else []
    job = ["--global-batch", "128", "--precision", "nvfp4", "--hardware", hardware]
    assert main([command, *BASE[1:], *job, *degrees]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"paraplan {command}: error: [nvfp4_needs_fp4_tensor_cores]")
    assert f"use --precision {other} or a Blackwell profile" in err


def _peak_gib(capsys, *flags: str) -> float:
    assert main([*BASE, *PLAN, "--hardware", "gb200-nvl72", "--dist-opt", *flags]) == 0
    out = capsys.readouterr().out
    return float(next(s for s in out.splitlines() if "peak memory (GiB)" in s).split("│")[2])


def test_no_fp4_param_gather_keeps_bf16_weights_beside_the_nvfp4_copies(capsys) -> None:
    # bf16 weights (2 bytes) plus TE's cached NVFP4 copies (2 x 0.5625) against NVFP4
    # parameters alone (2 x 0.5625): the bf16 copy adds memory
    nvfp4_params = _peak_gib(capsys)
    bf16_params = _peak_gib(capsys, "--no-fp4-param-gather")
    assert bf16_params > nvfp4_params
    assert _peak_gib(capsys, "--fp4-param-gather") == nvfp4_params


def test_fp4_param_flag_without_an_nvfp4_job_exits_2(capsys) -> None:
    argv = [*BASE, "--global-batch", "128", "--tp", "4", "--pp", "4", "--hardware", "gb200-nvl72"]
    assert main([*argv, "--no-fp4-param-gather"]) == 2
    err = capsys.readouterr().err
    assert "--no-fp4-param-gather" in err and "add --precision nvfp4" in err
    assert "Traceback" not in err
