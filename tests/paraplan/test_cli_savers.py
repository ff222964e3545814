"""Per-module recompute and CPU activation offloading on the command line: the estimate
and check flags reach the plan, bad module names exit 2 with one line, and the torch
runtime refuses them."""

from __future__ import annotations

import argparse
import json

import pytest

from paraplan.cli import main
from paraplan.commands import estimate

LLAMA3_70B_GB200 = [
    "--model", "llama3-70b", "--hardware", "gb200-nvl72", "--num-gpus", "64",
    "--seq-len", "8192", "--global-batch", "256", "--mbs", "2", "--precision", "fp8",
    "--use-megatron-fsdp",
]  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    parser = argparse.ArgumentParser(prog="paraplan estimate")
    estimate.add_arguments(parser)
    code = estimate.run(parser.parse_args([*argv, "--json"]))
    return code, json.loads(capsys.readouterr().out)


def test_offloading_layers_lowers_the_peak(capsys) -> None:
    _, plain = run(capsys, *LLAMA3_70B_GB200)
    code, off = run(capsys, *LLAMA3_70B_GB200, "--cpu-offloading-num-layers", "40")
    assert code == 0 and off["peak_memory_gib"] < plain["peak_memory_gib"]


def test_recompute_modules_reach_the_plan(capsys) -> None:
    base = [*LLAMA3_70B_GB200, "--recompute", "selective"]
    _, core = run(capsys, *base)
    _, mlp = run(capsys, *base, "--recompute-modules", "core_attn,mlp")
    assert mlp["peak_memory_gib"] < core["peak_memory_gib"]
    assert mlp["iteration_time_s"] > core["iteration_time_s"]


def test_bad_module_and_torch_runtime_exit_2_with_one_line(capsys) -> None:
    common = ["estimate", *LLAMA3_70B_GB200]
    assert main([*common, "--recompute", "selective", "--recompute-modules", "attention"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recompute_modules" in err[0]
    torch_run = [*common, "--runtime", "torch", "--offload-modules", "core_attn"]
    assert main(torch_run) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not offload" in err[0]


def test_check_names_the_offloading_rule(capsys) -> None:
    argv = ["check", *LLAMA3_70B_GB200, "--pp", "2", "--cpu-offloading-num-layers", "8"]
    assert main(argv) == 1
    assert "cpu_offloading_without_pipeline_or_recompute" in capsys.readouterr().out


TINY_MOE_PLAN = [
    "plan", "--model", "tiny-moe", "--hardware", "h100-sxm-80gb", "--num-gpus", "4",
    "--seq-len", "512", "--global-batch", "8", "--max-mbs", "2", "--no-tp-comm-overlap",
    "--no-overlap-param-gather", "--bucket-size", "0",
]  # fmt: skip


def test_plan_keeps_pinned_savers_in_table_and_json(capsys) -> None:
    pins = ["--recompute-modules", "layernorm,moe_act", "--offload-modules", "expert_fc1"]
    assert main([*TINY_MOE_PLAN, *pins, "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert top and all(e["recompute"] == "selective" for e in top)
    assert all(e["recompute_modules"] == ["layernorm", "moe_act"] for e in top)
    assert all(e["offload_modules"] == ["expert_fc1"] for e in top)
    assert main([*TINY_MOE_PLAN, *pins]) == 0
    assert "selective:layernorm+moe_act offload=expert_fc1" in capsys.readouterr().out


def test_plan_pins_layer_offloading_without_pipeline_or_recompute(capsys) -> None:
    assert main([*TINY_MOE_PLAN, "--cpu-offloading-num-layers", "2", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert top and all(e["cpu_offloading_num_layers"] == 2 for e in top)
    assert all(e["pp"] == 1 and e["recompute"] == "none" for e in top)


def test_plan_names_the_saver_rule_of_an_invalid_pin(capsys) -> None:
    assert main([*TINY_MOE_PLAN, "--recompute-modules", "mla_up_proj"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("No plan passes the rules") and "recompute_modules_match_model" in first
    assert main([*TINY_MOE_PLAN, "--offload-modules", "attention"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "offload_modules" in err[0]
