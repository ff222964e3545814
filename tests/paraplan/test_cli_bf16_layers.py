"""`paraplan estimate --first-last-layers-bf16`: priced and named among the assumptions in an
nvfp4 or fp8 job, refused with the rule and its fix elsewhere."""

from __future__ import annotations

import pytest

from paraplan.cli import main

BASE = ["estimate", "--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096"]
PLAN = ["--global-batch", "64", "--tp", "2", "--pp", "4", "--dist-opt", "--hardware", "b200"]
KEEP = ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "0"]


def _iteration_s(capsys, *flags: str) -> float:
    assert main([*BASE, *PLAN, *flags]) == 0
    out = capsys.readouterr().out
    return float(next(s for s in out.splitlines() if "iteration time (s)" in s).split("│")[2])


def test_kept_layers_are_priced_and_named(capsys) -> None:
    nvfp4 = _iteration_s(capsys, "--precision", "nvfp4")
    assert (
        main([*BASE, *PLAN, "--precision", "nvfp4", *KEEP, "--num-layers-at-end-in-bf16", "4"]) == 0
    )
    out = capsys.readouterr().out
    assert "the first 0 and last 4 decoder layers in bf16" in out
    kept = float(next(s for s in out.splitlines() if "iteration time (s)" in s).split("│")[2])
    assert kept != nvfp4


@pytest.mark.parametrize(
    ("flags", "rule", "fix"),
    [
        (["--precision", "bf16", *KEEP], "[bf16_layers_need_low_precision]", "--precision fp8"),
        (["--precision", "fp8", *KEEP], "[bf16_layers_need_low_precision]", "tensorwise or mxfp8"),
        (["--precision", "nvfp4", "--num-layers-at-end-in-bf16", "4"], "", "add --first-last"),
    ],
    ids=["bf16-job", "delayed-recipe", "count-without-switch"],
)
def test_what_cannot_run_exits_2_with_the_fix(capsys, flags, rule, fix) -> None:
    assert main([*BASE, *PLAN, *flags]) == 2
    err = capsys.readouterr().err
    assert rule in err and fix in err and "Traceback" not in err


def test_an_fp8_job_over_the_stage_bound_is_an_invalid_plan(capsys) -> None:
    # 32 layers over pp 4: Megatron-core takes at most 8 at either end in an fp8 job
    flags = ["--precision", "fp8", "--fp8-recipe", "tensorwise", *KEEP]
    assert main([*BASE, *PLAN, *flags, "--num-layers-at-end-in-bf16", "9"]) == 1
    assert "[bf16_layers_per_stage]" in capsys.readouterr().out
