"""The command line's `models` and `check` subcommands and its error paths."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from paraplan.cli import build_parser
from specs.presets import preset_names
from tests.paraplan.cli_helpers import run_cli

CHECK = [
    "check",
    "--model",
    "llama3-8b",
    "--num-gpus",
    "16",
    "--seq-len",
    "8192",
    "--global-batch",
    "64",
]


def test_models_json_lists_every_preset(capsys) -> None:
    code, out, _ = run_cli(capsys, "models", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [r["name"] for r in rows] == preset_names()
    by_name = {r["name"]: r for r in rows}
    # published: Llama 3 8B has 8.03e9 parameters; Mixtral 8x7B 46.7e9 total, 12.9e9 active
    assert by_name["llama3-8b"]["params_total"] == pytest.approx(8.03e9, rel=0.005)
    assert by_name["mixtral-8x7b"]["params_active"] == pytest.approx(12.88e9, rel=0.005)
    assert {"name", "params_total", "params_active", "num_layers"} <= set(rows[0])


def test_models_table(capsys) -> None:
    code, out, _ = run_cli(capsys, "models")
    assert code == 0 and "llama3.1-405b" in out and "deepseek-v3" in out
    # DeepSeek-V3 and Kimi-K2 use multi-latent attention: no KV groups to show (config.json)
    rows = {
        line.split("│")[1].strip(): line.split("│")[5].strip()
        for line in out.splitlines()
        if line.startswith("│")
    }
    assert rows["deepseek-v3"] == "MLA" and rows["kimi-k2"] == "MLA" and rows["llama3-8b"] == "8"


def test_models_mark_the_hybrid_presets(capsys) -> None:
    code, out, _ = run_cli(capsys, "models", "--json")
    by_name = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and by_name["llama3-8b"]["hybrid_layers"] is None
    assert by_name["nemotron-h-8b"]["hybrid_layers"] == "24 M, 4 *, 24 -"
    assert by_name["nemotron-3-nano"]["hybrid_layers"] == "23 M, 6 *, 23 E"
    assert by_name["nemotron-h-56b"]["hybrid_layer_pattern"].count("*") == 10
    code, out, _ = run_cli(capsys, "models")
    last = {
        line.split("│")[1].strip(): line.split("│")[-2].strip()
        for line in out.splitlines()
        if line.startswith("│")
    }
    assert last["nemotron-h-47b"] == "45 M, 5 *, 48 -" and last["llama3-8b"] == "-"


def test_check_valid_plan(capsys) -> None:
    code, out, _ = run_cli(capsys, *CHECK, "--tp", "4", "--pp", "2", "--sp", "--json")
    result = json.loads(out)
    assert code == 0 and result["valid"] is True and result["violations"] == []


def test_check_invalid_plan_lists_rules(capsys) -> None:
    code, out, _ = run_cli(capsys, *CHECK, "--tp", "3", "--pp", "5", "--json")
    result = json.loads(out)
    rules = {v["rule"] for v in result["violations"]}
    assert code == 1 and result["valid"] is False
    assert {"heads_divisible_by_tp", "world_size_matches"} <= rules
    assert all(v["message"] for v in result["violations"])


def test_check_readable_output(capsys) -> None:
    code, out, _ = run_cli(capsys, *CHECK, "--tp", "4", "--vpp", "2")
    assert code == 1
    assert out.startswith("invalid plan") and "[interleaved_needs_pp_gt_1]" in out
    code, out, _ = run_cli(capsys, *CHECK, "--tp", "8")
    assert code == 0 and out.startswith("valid:")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["check", "--model", "llama9-1b", *CHECK[3:]], "unknown model preset 'llama9-1b'"),
        ([*CHECK, "--tp", "-2"], "must be a positive integer, got -2"),
        ([*CHECK[:-2], "--global-batch", "0"], "global_batch_size) must be a positive integer"),
        ([*CHECK, "--tp", "two"], "invalid int value"),
        # check once ignored --hardware: an unknown profile, or fp8 on an A100, was "valid"
        ([*CHECK, "--hardware", "h1000"], "unknown hardware profile 'h1000'"),
        ([*CHECK, "--hardware", "a100-sxm-80gb", "--precision", "fp8"], "needs FP8 tensor cores"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv: list[str], needle: str) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([*CHECK, "--tp", "-2"], "--tp (ParallelPlan.tp)"),
        ([*CHECK[:-2], "--global-batch", "0"], "--global-batch (TrainingJob.global_batch_size)"),
        ([*CHECK[:-4], "--seq-len", "0", *CHECK[-2:]], "--seq-len (TrainingJob.seq_length)"),
        ([*CHECK, "--mbs", "0"], "--mbs (ParallelPlan.micro_batch_size)"),
        ([*CHECK, "--recompute-modules", "foo"], "--recompute-modules (ParallelPlan.recompute"),
        ([*CHECK, "--offload-modules", "foo"], "--offload-modules (ParallelPlan.offload_modules)"),
    ],
)
def test_out_of_range_values_name_their_flag(capsys, argv: list[str], flag: str) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and flag in err


def test_malformed_model_json_is_exit_2(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "model.json"
    bad.write_text('{"num_layers": 2,')
    code, _, err = run_cli(capsys, "check", "--model", str(bad), *CHECK[3:])
    assert code == 2 and "malformed JSON" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("module", ["paraplan", "paraplan.cli"])
def test_python_dash_m_entry_point(module: str) -> None:
    # `python -m paraplan.cli` ran the module without calling main: no output, exit 0
    proc = subprocess.run(
        [sys.executable, "-m", module, "check", "--model", "nope", *CHECK[3:]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("paraplan check: error: unknown model preset 'nope'")


def test_version_and_usage_errors_name_the_program(capsys) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("paraplan ")
    code, _, err = run_cli(capsys)
    assert code == 2 and err.startswith("paraplan: error: ")
    code, _, err = run_cli(capsys, "plan", "--bogus")
    assert code == 2 and err.startswith("paraplan plan: error: ")


def test_an_unknown_flag_names_the_command(capsys) -> None:
    # argparse blamed `paraplan:` for a flag that the subcommand does not take
    code, _, err = run_cli(capsys, "models", "--json-lines")
    assert code == 2
    assert err.startswith("paraplan models: error: unrecognized arguments: --json-lines")
    assert "`paraplan models --help`" in err


def test_docs_name_every_command_and_flag() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command_parser in sub.choices.items():
        assert f"paraplan {name}" in docs, name
        for action in command_parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    # a switch's --no- form is documented with the switch ("each with its
                    # `--no-` form")
                    assert f"`--{flag.removeprefix('--').removeprefix('no-')}" in docs, (name, flag)


def test_megatron_spellings_are_aliases_of_the_plan_flags(capsys) -> None:
    # The parallel arguments of a Megatron-LM launch line (arguments.py spellings).
    megatron = [
        *("estimate", "--model", "llama3-70b", "--num-gpus", "64", "--seq-length", "8192"),
        *("--global-batch-size", "128", "--tensor-model-parallel-size", "4"),
        *("--pipeline-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank", "2"),
        *("--micro-batch-size", "1", "--sequence-parallel", "--use-distributed-optimizer"),
        *("--recompute-granularity", "selective", "--json"),
    ]
    short = [
        *("estimate", "--model", "llama3-70b", "--num-gpus", "64", "--seq-len", "8192"),
        *("--global-batch", "128", "--tp", "4", "--pp", "4", "--vpp", "2", "--mbs", "1"),
        *("--sp", "--dist-opt", "--recompute", "selective", "--json"),
    ]
    code, out, err = run_cli(capsys, *megatron)
    assert code == 0, err
    code_short, out_short, _ = run_cli(capsys, *short)
    assert code_short == 0 and out == out_short


def test_hardware_help_lists_the_stored_profiles() -> None:
    # There is no `profiles` command: the --hardware help is where the names are found.
    from profiles.store import stored_profile_names

    parser = build_parser(("estimate",))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["estimate"].format_help().split())
    names = stored_profile_names()
    assert "gb200-nvl72" in names and all(name in text for name in names)


def test_recompute_num_layers_help_agrees_between_estimate_and_plan() -> None:
    # Megatron counts --recompute-num-layers per model chunk (block) or per group (uniform),
    # which is what the rule recompute_num_layers_within_chunk checks; never "per stage".
    parser = build_parser(("estimate", "plan"))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("estimate", "plan"):
        text = " ".join(sub.choices[name].format_help().split())
        help_text = text[text.index("--recompute-num-layers RECOMPUTE_NUM_LAYERS with") :][:200]
        assert "per pipeline chunk (block) or per recompute group (uniform)" in help_text, name


@pytest.mark.parametrize("command", ["check", "estimate", "plan"])
def test_an_empty_layout_is_refused_not_read_as_one_stage(capsys, command: str) -> None:
    # "" was expanded to one empty virtual stage and priced or ranked as a layout
    argv = [command, *CHECK[1:], "--pp", "2", "--pipeline-model-parallel-layout", ""]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--pipeline-model-parallel-layout (ParallelPlan.pipeline_model_parallel_layout)" in err
    assert "got ''" in err and "'Et|(tt|)*30mL'" in err


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("h100", "'h100-sxm-80gb'"), ("a100", "'a100-sxm-40gb' or 'a100-sxm-80gb'")],
)
def test_a_short_hardware_name_suggests_the_stored_profiles(
    capsys, name: str, suggestion: str
) -> None:
    code, _, err = run_cli(capsys, *CHECK, "--hardware", name)
    assert code == 2 and f"unknown hardware profile {name!r} (did you mean {suggestion}?)" in err
