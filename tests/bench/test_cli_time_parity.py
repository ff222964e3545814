"""`paraplan estimate` prices published MoE and Blackwell rows' iteration time as
`bench/validate_published.py` does.

Each case is the command line a user writes for one row of ``published-runs-dev.csv``: the
model preset, the printed plan, and the recipe's settings as flags, the time-only ones of
`paraplan.time_args` included (the sources the `bench/*_recipes.py` modules cite). Both
sides run the same `estimate_plan` on the same inputs, so the times must agree to
`cli_parity.TIME_TOLERANCE`.
"""

from __future__ import annotations

import json

import pytest

from paraplan.cli import main
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

pricing = load_bench("row_pricing")
figures = load_bench("row_figures")
cli_parity = load_bench("cli_parity")

QWEN3_30B_GB200 = [
    "--model", "qwen3-30b-a3b", "--hardware", "gb200-nvl72", "--num-gpus", "8",
    "--seq-len", "4096", "--global-batch", "512", "--ep", "8", "--etp", "1", "--mbs", "4",
    "--dist-opt", "--overlap-grad-reduce", "--overlap-param-gather", "--precision", "fp8",
    "--fp8-recipe", "mxfp8", "--fp8-param-gather", "--grad-reduce-in-bf16",
    "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te",
]  # fmt: skip
"""Qwen3 30B-A3B MXFP8 on 8 GB200 (Megatron-Bridge): the printed plan and the memory
settings of `test_cli_memory_parity`."""

HYBRIDEP_ROUTER_GRAPHS = [
    "--moe-token-dispatcher-type", "flex",
    "--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_router", "moe_preprocess",
]  # fmt: skip
"""HybridEP (the flex dispatcher) with TE graphs of the router and the preprocessing
(`moe_recipes.ROUTER_SCOPES`, 25.11 to 26.04)."""

CASES: dict[str, list[str]] = {
    # Row 271 (26.02.01): HybridEP and router graphs
    "271": [*QWEN3_30B_GB200, *HYBRIDEP_ROUTER_GRAPHS],
    # Row 107 (26.06.01): the all-to-all overlap under full-iteration graphs with TE's
    # fused grouped MLP and FP8 attention, and 26.06's expandable segments
    # (`moe_recipes.FUSED_MLP_FP8_ATTENTION_STEP`)
    "107": [
        *QWEN3_30B_GB200, "--expandable-segments", "--moe-token-dispatcher-type", "flex",
        "--overlap-moe-expert-parallel-comm", "--cuda-graph-impl", "full_iteration",
        "--cutedsl-fused-grouped-mlp", "--fp8-attention",
    ],
    # Row 172 (DeepSeek-V3 MXFP8 on 256 GB200, 26.04.01): the recipe's layout and
    # selective recompute of the MLP, HybridEP with attention and router graphs, and the
    # cuDNN norms that perf_plugins.py keeps for DeepSeek MXFP8 on GB200 (`norm_recipes`)
    "172": [
        "--model", "deepseek-v3", "--hardware", "gb200-nvl72", "--num-gpus", "256",
        "--seq-len", "4096", "--global-batch", "4096", "--pp", "4", "--vpp", "4",
        "--ep", "64", "--etp", "1", "--recompute", "selective", "--recompute-modules", "mlp",
        "--pipeline-model-parallel-layout", "Etttt|" + "tttt|" * 14 + "tmL",
        "--dist-opt", "--overlap-grad-reduce", "--overlap-param-gather", "--precision", "fp8",
        "--fp8-recipe", "mxfp8", "--fp8-param-gather", "--grad-reduce-in-bf16",
        "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te",
        "--expandable-segments", "--moe-token-dispatcher-type", "flex",
        "--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "attn", "moe_router",
        "moe_preprocess", "--cudnn-norm",
    ],
}  # fmt: skip


def bench_seconds(row_id: str) -> float:
    """The bench's iteration time of the row, seconds."""
    (raw,) = dev_rows(row_id)
    _, case = pricing.evaluate_row(raw)
    est = figures.case_estimate(case)
    return est.iteration_time_s


def cli_seconds(capsys: pytest.CaptureFixture[str], argv: list[str]) -> float:
    """``paraplan estimate ARGV --json``'s iteration time, as the command line runs it."""
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["iteration_time_s"]


@pytest.mark.parametrize("row_id", CASES)
def test_the_cli_prices_a_moe_row_in_the_bench_time(capsys, row_id):
    want = bench_seconds(row_id)
    assert cli_seconds(capsys, CASES[row_id]) == pytest.approx(want, rel=cli_parity.TIME_TOLERANCE)


def test_the_time_flags_are_what_brings_the_row_to_the_bench_time(capsys):
    """Row 271 without its dispatcher and graph flags (Megatron-core's alltoall, eager) is
    priced differently: the flags carry the recipe's time."""
    default = cli_seconds(capsys, QWEN3_30B_GB200)
    assert default != pytest.approx(bench_seconds("271"), rel=1e-3)


@pytest.mark.parametrize(
    "row_id",
    [
        "174",  # DeepSeek-V3 MXFP8 B200 (26.04.01): DeepEP, all-to-all overlap, graphs
        "127",  # GPT-OSS 120B MXFP8 GB300 (26.06): unfused YaRN RoPE, fused grouped MLP
        "161",  # FP8 GB200 Llama: ring-exchange reduce-scatter, bulk overlaps without margin
        "38",  # H100 BF16 on a pre-FA3 stack: FlashAttention-2 kernels
        "152",  # Llama 3 70B FP8 GB300 (26.06): LoRA rank 16 on linear_qkv
    ],
)
def test_cli_parity_states_every_setting_and_prices_the_bench_time(tmp_path, row_id):
    (raw,) = dev_rows(row_id)
    result = cli_parity.row_parity(raw, tmp_path)
    assert result["unexpressed_memory"] == [] and result["unexpressed_time"] == []
    assert result["time_relative_gap"] <= cli_parity.TIME_TOLERANCE
    assert result["cli_iteration_time_s"] == pytest.approx(bench_seconds(row_id), rel=1e-9)
