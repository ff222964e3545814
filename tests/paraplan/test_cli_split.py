"""The published recipes with uneven pipeline splits through `paraplan check` and
`paraplan estimate` (flags with Megatron-LM's names), and a pinned split in `plan`."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.commands import check, estimate

# (model, GPUs, seq, global batch, plan flags); sources in tests/planner/test_export.py.
RECIPES = {
    "llama3-405b-pp16-first-last-7": (
        "llama3.1-405b", 16384, 8192, 2048,
        ["--tp", "8", "--pp", "16", "--sp", "--dist-opt", "--recompute", "full",
         "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7"],
    ),
    "llama3-405b-bridge": (
        "llama3.1-405b", 1024, 8192, 512,
        ["--tp", "8", "--pp", "8", "--vpp", "8", "--cp", "2", "--sp", "--dist-opt",
         "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"],
    ),
    "qwen3-235b-a22b-bridge": (
        "qwen3-235b-a22b", 256, 4096, 2048,
        ["--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "32", "--etp", "1", "--sp",
         "--dist-opt", "--account-for-embedding-in-pipeline-split",
         "--account-for-loss-in-pipeline-split"],
    ),
    "deepseek-v3-bridge": (
        "deepseek-v3", 1024, 4096, 8192,
        ["--tp", "2", "--pp", "8", "--vpp", "4", "--ep", "64", "--sp", "--dist-opt",
         "--pipeline-model-parallel-layout", "Et|(tt|)*30mL"],
    ),
}  # fmt: skip


def _argv(recipe: str) -> list[str]:
    model, gpus, seq, batch, flags = RECIPES[recipe]
    return [
        "--model", model, "--hardware", "h100-sxm-80gb", "--num-gpus", str(gpus),
        "--seq-len", str(seq), "--global-batch", str(batch), *flags,
    ]  # fmt: skip


def _run(module, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    code = module.run(parser.parse_args(argv))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_check_json_calls_the_recipes_valid(recipe: str, capsys) -> None:
    code, out = _run(check, [*_argv(recipe), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["valid"] and data["violations"] == []


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_estimate_prints_per_stage_memory_and_time(recipe: str, capsys) -> None:
    code, out = _run(estimate, _argv(recipe), capsys)
    assert code == 0
    assert "memory per rank (GiB) by pipeline stage" in out
    assert "time per pipeline stage" in out
    code, out = _run(estimate, [*_argv(recipe), "--json"], capsys)
    stages = json.loads(out)["stages"]
    pp = int(_argv(recipe)[_argv(recipe).index("--pp") + 1])
    assert [s["stage"] for s in stages] == list(range(pp))
    layers = {"llama3.1-405b": 126, "qwen3-235b-a22b": 94, "deepseek-v3": 61}
    assert sum(s["num_layers"] for s in stages) == layers[RECIPES[recipe][0]]


def test_check_names_the_split_rule(capsys) -> None:
    argv = _argv("llama3-405b-pp16-first-last-7")
    argv[argv.index("--decoder-last-pipeline-num-layers") + 1] = "8"
    code, out = _run(check, [*argv, "--json"], capsys)
    data = json.loads(out)
    assert code != 0 and not data["valid"]
    assert data["violations"][0]["rule"] == "uneven_middle_layers_divisible_by_middle_stages"
