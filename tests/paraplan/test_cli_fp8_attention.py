"""``--fp8-attention`` / ``--no-fp8-attention`` (`ExecutionOptions.fp8_attention`): priced by
`paraplan estimate` and `paraplan plan`, recorded in plan.json, refused by both exports and
by `paraplan execute`, and refused for jobs, runtimes and profiles that cannot run it
(asserted on rule ids)."""

from __future__ import annotations

import json

from costmodel.fp8_attention import (
    FP8_ATTENTION_CURVE_RULE,
    FP8_ATTENTION_KERNEL_RULE,
    FP8_ATTENTION_RULE,
)
from paraplan.cli import main
from paraplan.recipe_args import options_from_args
from planner.export_options import RULE
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

BASE = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "8192", "--global-batch", "32"]
PLAN = ["--tp", "2", "--dist-opt", "--hardware", "gb200-nvl72"]
MXFP8 = ["--precision", "fp8", "--fp8-recipe", "mxfp8"]


def test_the_flag_sets_the_option_and_no_flag_keeps_bf16_attention() -> None:
    assert options_from_args(parse_estimate(BASE, "--fp8-attention")).fp8_attention
    assert not options_from_args(parse_estimate(BASE, "--no-fp8-attention")).fp8_attention
    assert not options_from_args(parse_estimate(BASE)).fp8_attention


def test_estimate_prices_fp8_attention_and_names_its_saved_tensors(capsys) -> None:
    off = run_estimate_json(capsys, BASE, *PLAN, *MXFP8)
    on = run_estimate_json(capsys, BASE, *PLAN, *MXFP8, "--fp8-attention")
    assert on["iteration_time_s"] != off["iteration_time_s"]
    assert run_estimate_json(capsys, BASE, *PLAN, *MXFP8, "--no-fp8-attention") == off
    assert main(["estimate", *BASE, *PLAN, *MXFP8, "--fp8-attention"]) == 0
    assert "FP8 attention (--fp8-attention)" in capsys.readouterr().out


def _refused(capsys, *argv: str) -> str:
    assert main(["estimate", *BASE, *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_jobs_runtimes_and_profiles_that_cannot_run_it_exit_2(capsys) -> None:
    for precision in ("bf16", "nvfp4"):
        err = _refused(capsys, *PLAN, "--precision", precision, "--fp8-attention")
        assert f"[{FP8_ATTENTION_RULE}]" in err
    err = _refused(capsys, *PLAN, *MXFP8, "--fp8-attention", "--runtime", "torch")
    assert f"[{FP8_ATTENTION_KERNEL_RULE}]" in err
    err = _refused(
        capsys, "--tp", "2", "--hardware", "mi300x", "--precision", "fp8", "--fp8-attention"
    )
    assert f"[{FP8_ATTENTION_CURVE_RULE}]" in err


def test_plan_records_it_and_the_exports_and_the_executor_refuse_it(capsys, tmp_path) -> None:
    argv = ["plan", *BASE, "--hardware", "h100-sxm-80gb", "--precision", "fp8", "--fp8-attention"]
    few = ["--no-overlap-param-gather", "--no-tp-comm-overlap", "--bucket-size", "0"]
    assert main([*argv, *few, "--max-mbs", "1", "--out", str(tmp_path)]) == 0
    path = tmp_path / "plan.json"
    assert json.loads(path.read_text())["execution"] == {"fp8_attention": True}
    capsys.readouterr()
    assert main(["export", str(path), "--to", "megatron"]) == 2
    err = capsys.readouterr().err
    assert f"[{RULE}]" in err and "fp8_attention=True" in err
    assert main(["export", str(path), "--to", "torchtitan"]) == 2
    assert "fp8_attention=True" in capsys.readouterr().err
    assert main(["execute", str(path), "--out", str(tmp_path / "run")]) == 2
    assert f"[{FP8_ATTENTION_KERNEL_RULE}]" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
