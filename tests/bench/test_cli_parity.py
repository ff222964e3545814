"""bench/cli_parity.py: each published row's `paraplan estimate` command line, what it
cannot state, and the CLI's memory against the bench's."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS
from paraplan.commands import estimate
from paraplan.recipe_args import options_from_args
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

cli_parity = load_bench("cli_parity")


def one_row(row_id: str) -> dict[str, str]:
    (raw,) = dev_rows(row_id)
    return raw


@pytest.mark.parametrize(
    "row_id",
    [
        "337",  # Llama 3.1 405B FP8-CS B200: split flags, TP overlap, fused loss
        "353",  # Llama 3.1 405B FP8 GB200: Megatron-FSDP with 95 offloaded layers
        "109",  # Qwen3 235B-A22B MXFP8 GB200: ep32 etp1 pp8 vpp3, expandable segments
        "172",  # DeepSeek-V3 FP8 B200: explicit layout, selective recompute of mlp
        "391",  # Qwen3 235B-A22B MXFP8 GB200 (model zoo): precision-aware optimizer
        "136",  # Kimi-K2 MXFP8 GB300: dist_muon with FP8 parameters
    ],
)
def test_the_command_line_states_the_row_and_prices_it_as_the_bench(tmp_path, row_id):
    result = cli_parity.row_parity(one_row(row_id), tmp_path)
    assert result["unexpressed_memory"] == []
    assert result["max_stage_gap_gib"] <= cli_parity.TOLERANCE_GIB
    assert result["cli_peak_gib"] == pytest.approx(result["bench_peak_gib"], abs=0.1)
    assert result["command"].startswith("paraplan estimate --model ")


def test_recipe_flags_follow_the_rows_options(tmp_path):
    command = shlex.split(cli_parity.row_parity(one_row("337"), tmp_path)["command"])
    for flag in ("--grad-reduce-in-bf16", "--fp8-param-gather", "--cross-entropy-loss-fusion"):
        assert flag in command
    assert command[command.index("--fp8-recipe") + 1] == "tensorwise"
    assert command[command.index("--cross-entropy-fusion-impl") + 1] == "te"
    zoo = shlex.split(cli_parity.row_parity(one_row("391"), tmp_path)["command"])
    assert "--use-precision-aware-optimizer" in zoo
    assert (
        zoo[zoo.index("--exp-avg-dtype") + 1] == zoo[zoo.index("--exp-avg-sq-dtype") + 1] == "bf16"
    )
    kimi = shlex.split(cli_parity.row_parity(one_row("136"), tmp_path)["command"])
    assert kimi[kimi.index("--optimizer") + 1] == "dist_muon"
    assert "--optimizer" not in command
    fsdp = shlex.split(cli_parity.row_parity(one_row("353"), tmp_path)["command"])
    assert fsdp[fsdp.index("--cpu-offloading-num-layers") + 1] == "95"
    assert fsdp[fsdp.index("--data-parallel-sharding-strategy") + 1] == "optim_grads_params"


def test_the_2021_framework_settings_are_named_not_priced(tmp_path):
    # SC21 Table 1 row 1 runs Megatron-LM 2021 (`MEGATRON_2021`): hidden dropout masks,
    # kept pipeline outputs, PyTorch DDP's bucket copy, the step's fp32 gradient copy, local
    # DDP's held gradients and its allocator fragmentation have no flag
    result = cli_parity.row_parity(one_row("1"), tmp_path)
    assert set(result["unexpressed_memory"]) == {
        "options.hidden_dropout",
        "options.deallocate_pipeline_outputs",
        "options.ddp_gradient_copy",
        "options.allocator_fragmentation",
        "options.step_gradient_copy",
        "options.stale_main_grad",
    }
    assert "cli_peak_gib" not in result
    assert "options.loss_scaling" in result["unexpressed_time"]


@pytest.mark.parametrize(("fraction", "overlap"), [(1.0, True), (0.25, False)])
def test_offload_flags_state_the_offload_fields(fraction, overlap):
    options = dataclasses.replace(
        DEFAULT_OPTIONS,
        precision_aware_optimizer=True,
        optimizer_cpu_offload_fraction=fraction,
        overlap_cpu_optimizer_d2h_h2d=overlap,
    )
    parser = argparse.ArgumentParser()
    estimate.add_arguments(parser)
    base = ["--model", "tiny", "--num-gpus", "4", "--seq-len", "512", "--global-batch", "8"]
    args = parser.parse_args([*base, *cli_parity.recipe_flags(options, "bf16")])
    assert options_from_args(args) == options
    assert cli_parity.optimizer_offload_arguments(DEFAULT_OPTIONS) == []
