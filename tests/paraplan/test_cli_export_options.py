"""`paraplan plan --out` records the execution options of its flags in plan.json and
`paraplan export` turns them into Megatron-LM arguments; the command line reads the
export's spellings of the options it shares with Megatron-LM back into the same options."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from paraplan.cli import main
from paraplan.recipe_args import options_from_args
from planner.export_options import (
    cross_entropy_arguments,
    cuda_graph_arguments,
    fp8_arguments,
    gradient_arguments,
    optimizer_offload_arguments,
    optimizer_precision_arguments,
)
from tests.paraplan.cli_helpers import parse_estimate

BASE = ["--model", "tiny", "--hardware", "h100-sxm-80gb", "--seq-len", "512", "--global-batch", "8"]
FEW = ["--no-overlap-param-gather", "--no-tp-comm-overlap", "--bucket-size", "0", "--max-mbs", "2"]
FP8_FLAGS = [
    "--precision", "fp8", "--fp8-recipe", "tensorwise", "--fp8-param-gather",
    "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16",
]  # fmt: skip


def test_plan_out_records_the_options_and_export_writes_their_flags(capsys, tmp_path) -> None:
    argv = ["plan", *BASE, "--num-gpus", "4", *FEW, "--dist-opt", *FP8_FLAGS]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "plan.json").read_text())["execution"]
    assert record == {
        "fp8_recipe": "tensorwise", "fp8_param": True, "precision_aware_optimizer": True,
        "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16",
    }  # fmt: skip
    capsys.readouterr()
    assert main(["export", str(tmp_path / "plan.json"), "--to", "megatron"]) == 0
    words = shlex.split(capsys.readouterr().out.replace("\\\n", " "), comments=True)
    for flag in ("--fp8-param-gather", "--use-precision-aware-optimizer"):
        assert flag in words
    assert words[words.index("--fp8-recipe") + 1] == "tensorwise"
    assert words[words.index("--exp-avg-dtype") + 1] == "bf16"
    assert words[words.index("--exp-avg-sq-dtype") + 1] == "bf16"


def test_export_refuses_what_megatron_cannot_take_without_a_traceback(capsys, tmp_path) -> None:
    argv = ["plan", *BASE, "--num-gpus", "4", *FEW, "--cross-entropy-loss-fusion"]
    assert main([*argv, "--cross-entropy-fusion-impl", "te", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["export", str(tmp_path / "plan.json"), "--to", "megatron"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paraplan export: error: [export_execution_options]")
    assert "cross_entropy_fusion='te'" in err and "Traceback" not in err


def test_unknown_option_in_plan_json_is_a_clear_error(capsys, tmp_path) -> None:
    assert main(["plan", *BASE, "--num-gpus", "4", *FEW, "--out", str(tmp_path)]) == 0
    path = tmp_path / "plan.json"
    data = json.loads(path.read_text())
    data["execution"] = {"fp8_recipie": "tensorwise"}
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["export", str(path), "--to", "megatron"]) == 2
    err = capsys.readouterr().err
    assert "'fp8_recipie' is no execution option (did you mean 'fp8_recipe'?)" in err
    assert "remove it" in err


@pytest.mark.parametrize(
    "changes",
    [
        {"fp8_recipe": "mxfp8", "fp8_param": True},
        {"precision_aware_optimizer": True, "exp_avg_dtype": "fp8", "main_grad_bytes": 2},
        {"precision_aware_optimizer": True, "optimizer_cpu_offload_fraction": 0.5,
         "overlap_cpu_optimizer_d2h_h2d": True},
        {"main_grad_bytes": 2, "cross_entropy_fusion": "native"},
        {"cuda_graph_scopes": frozenset({"attn", "moe_router"})},
        {"cuda_graph_scopes": frozenset({"layer"})},
    ],
)  # fmt: skip
def test_the_command_line_reads_the_exported_spellings_back(changes) -> None:
    options = dataclasses.replace(DEFAULT_OPTIONS, **changes)
    flags = fp8_arguments(options) + gradient_arguments(options)
    flags += optimizer_precision_arguments(options) + optimizer_offload_arguments(options)
    flags += cross_entropy_arguments(options) + cuda_graph_arguments(options.cuda_graph_scopes)
    args = parse_estimate([*BASE, "--num-gpus", "4", "--precision", "fp8"], *flags)
    assert options_from_args(args) == options


@pytest.mark.parametrize(("sharding", "noted"), [("--dist-opt", True), ("--no-dist-opt", False)])
def test_torchtitan_export_states_that_it_runs_fsdp_for_a_distributed_optimizer(
    capsys, tmp_path, sharding: str, noted: bool
) -> None:
    # the export wrote data_parallel_shard_degree = dp (FSDP) for a plan priced with
    # ZeRO-1 and said nothing of the weights and gradients torchtitan shards too
    argv = ["plan", *BASE, "--num-gpus", "4", *FEW, "--tp", "1", "--pp", "1", sharding]
    assert main([*argv, "--no-use-megatron-fsdp", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["export", str(tmp_path / "plan.json"), "--to", "torchtitan"]) == 0
    captured = capsys.readouterr()
    expected = "data_parallel_shard_degree = 4 runs FSDP"
    assert (f"# {expected}" in captured.out) is noted
    assert (f"paraplan export: note: {expected}" in captured.err) is noted
    if noted:
        assert "priced with the optimizer state sharded over dp" in captured.err
        assert "--data-parallel-sharding-strategy optim_grads_params" in captured.err
