"""The published recipes with uneven pipeline splits through `paraplan check` and
`paraplan estimate` (flags with Megatron-LM's names), and a pinned split in `plan`."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.commands import check, estimate
from paraplan.plan_args import plan_from_args

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


def test_a_layout_without_vpp_takes_its_virtual_stages_over_pp(capsys) -> None:
    # Megatron-LM derives vpp from --pipeline-model-parallel-layout (stages / pp); the
    # same plan once read as vpp 1 and broke layout_stages_match_pp_vpp
    argv = _argv("deepseek-v3-bridge")
    at = argv.index("--vpp")
    del argv[at : at + 2]
    code, out = _run(check, [*argv, "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["valid"], data
    assert "vpp4" in data["plan"]
    code, out = _run(check, [*argv, "--vpp", "2", "--json"], capsys)
    rules = {v["rule"] for v in json.loads(out)["violations"]}
    assert code == 1 and "layout_stages_match_pp_vpp" in rules


def test_recompute_method_reaches_the_plan() -> None:
    # Megatron-LM's --recompute-method, which plan.json records and export writes, was
    # refused by check and estimate, so a block plan could not be re-checked or re-priced
    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    argv = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096"]
    argv += ["--global-batch", "64", "--pp", "2", "--recompute-granularity", "full"]
    block = plan_from_args(parser.parse_args([*argv, "--recompute-method", "block"]))
    assert block.recompute_method == "block"
    assert plan_from_args(parser.parse_args(argv)).recompute_method == "uniform"


def _plan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    return parser


def test_layers_per_virtual_stage_sets_vpp_as_megatron_does() -> None:
    # Megatron-LM validate_args: vpp = ((num_layers + account-for flags) / pp) / N
    argv = _argv("llama3-405b-bridge")
    at = argv.index("--vpp")
    del argv[at : at + 2]
    pinned = plan_from_args(_plan_parser().parse_args(_argv("llama3-405b-bridge")))
    derived = _plan_parser().parse_args([*argv, "--num-layers-per-virtual-pipeline-stage", "2"])
    assert plan_from_args(derived) == pinned  # (126 + 2) / 8 / 2 = vpp 8
    short = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096"]
    short += ["--global-batch", "64", "--pp", "4", "--num-layers-per-virtual-pipeline-stage"]
    assert plan_from_args(_plan_parser().parse_args([*short, "4"])).vpp == 2  # 32 / 4 / 4


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--pp", "4", "--vpp", "2"], ["--vpp (2)", "cannot be combined"]),
        (
            ["--pp", "4", "--pipeline-model-parallel-layout", "Et|tttt|tttt|tttt|tttL"],
            ["--pipeline-model-parallel-layout ('Et|", "cannot be combined"],
        ),
        (["--pp", "4", "--decoder-first-pipeline-num-layers", "6"], ["first-pipeline", "(6)"]),
        (["--pp", "4"], ["(3) must divide", "num_layers (32) / pp (4) = 8", "[1, 2, 4, 8]"]),
        (["--pp", "3"], ["num_layers (32) divisible by pp (3)", "use pp in"]),
    ],
)
def test_layers_per_virtual_stage_refusals_are_one_line_exit_2(
    capsys, extra: list[str], needles: list[str]
) -> None:
    argv = ["check", "--model", "llama3-8b", "--num-gpus", "24", "--seq-len", "4096"]
    argv += ["--global-batch", "48", *extra, "--num-layers-per-virtual-pipeline-stage", "3"]
    from paraplan.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--num-layers-per-virtual-pipeline-stage (3)" in err
    assert all(n in err for n in needles), err


def test_plan_pins_the_vpp_of_layers_per_virtual_stage(capsys) -> None:
    from paraplan.cli import main
    from paraplan.commands import plan as plan_command
    from paraplan.knob_args import space_from_args

    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    argv = ["--model", "llama3-8b", "--num-gpus", "8", "--seq-len", "4096"]
    argv += ["--global-batch", "64", "--num-layers-per-virtual-pipeline-stage", "4"]
    fixed = space_from_args(parser.parse_args([*argv, "--pp", "2"])).fixed
    assert fixed["vpp"] == 4 and fixed["pp"] == 2
    assert fixed["account_for_embedding_in_pipeline_split"] is False
    assert main(["plan", *argv]) == 2
    assert "needs a fixed pp: give --pp" in capsys.readouterr().err
