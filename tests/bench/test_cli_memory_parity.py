"""`paraplan estimate` prices published rows' memory as `bench/validate_published.py` does.

Each case is the command line a user writes for one row of ``published-runs-dev.csv`` from
its printed configuration and its recipe's settings (the sources the `bench/*_recipes.py`
modules and `bench/published_rows.py` cite): the model preset, the plan, and the recipe
flags of `paraplan.recipe_args.add_recipe_args`. The CLI's memory per pipeline stage must
equal the bench's for the same row (`row_pricing.evaluate_row`, the bench's own path).
"""

from __future__ import annotations

import json

import pytest

from paraplan.cli import main
from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import dev_rows

pricing = load_bench("row_pricing")
figures = load_bench("row_figures")

MEGATRON_BRIDGE_FP8_CS = [
    "--precision", "fp8", "--fp8-recipe", "tensorwise", "--fp8-param-gather",
    "--grad-reduce-in-bf16", "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te",
]  # fmt: skip
"""Megatron-Bridge's FP8 current-scaling recipe: FP8 parameters (``mixed_precision.py``),
bf16 gradient reduction and TE's fused cross entropy (`row_options.MEGATRON_BRIDGE_PERF`)."""

LLAMA405_B200 = [
    "--model", "llama3.1-405b", "--hardware", "b200", "--num-gpus", "128",
    "--seq-len", "8192", "--global-batch", "64", "--tp", "4", "--pp", "8", "--vpp", "8",
    "--cp", "2", "--sp", "--dist-opt", "--overlap-grad-reduce", "--overlap-param-gather",
    "--tp-comm-overlap", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
]  # fmt: skip
"""Row 337 (Megatron-Bridge 25.11, Llama 3.1 405B FP8-CS on 128 B200): the printed plan
with the recipe's pipeline split and TP overlap (`pipeline_recipes.ACCOUNT_FOR_BOTH`,
`overlap_recipes.TP_COMM_OVERLAP_MODELS`)."""

CASES: dict[str, list[str]] = {
    "337": [*LLAMA405_B200, *MEGATRON_BRIDGE_FP8_CS],
    # Row 69 (NeMo long-sequence, Llama 2 7B FP8 on 16 H100, seq 16K): delayed scaling,
    # bf16 parameters, gradients reduced in bf16 (`precision_recipes.BF16_GRAD_SYNC`)
    "69": [
        "--model", "llama2-7b", "--hardware", "h100-sxm-80gb", "--num-gpus", "16",
        "--seq-len", "16384", "--global-batch", "256", "--tp", "2", "--sp", "--dist-opt",
        "--overlap-grad-reduce", "--overlap-param-gather", "--precision", "fp8",
        "--grad-reduce-in-bf16",
    ],
    # Row 107 (Megatron-Bridge 26.06.01, Qwen3 30B-A3B MXFP8 on 8 GB200): MXFP8 FP8
    # parameters, the recipe's FP8 attention (its saved Q, K, V in MXFP8,
    # `moe_recipes.FUSED_MLP_FP8_ATTENTION_STEP`), and the 26.06 launch's expandable
    # allocator segments (`row_recipes.expandable_segments`)
    "107": [
        "--model", "qwen3-30b-a3b", "--hardware", "gb200-nvl72", "--num-gpus", "8",
        "--seq-len", "4096", "--global-batch", "512", "--ep", "8", "--mbs", "4",
        "--dist-opt", "--overlap-grad-reduce", "--overlap-param-gather", "--precision", "fp8",
        "--fp8-recipe", "mxfp8", "--fp8-param-gather", "--fp8-attention",
        "--grad-reduce-in-bf16", "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
        "te", "--expandable-segments",
    ],
}  # fmt: skip


def bench_stage_gib(row_id: str) -> list[float]:
    """The bench's memory per pipeline stage of the row, GiB."""
    (raw,) = dev_rows(row_id)
    outcome, case = pricing.evaluate_row(raw)
    est = figures.case_estimate(case)
    assert est.peak_memory_gib == outcome.peak_memory_gib
    return [s.total_bytes / 2**30 for s in est.memory]


def cli_estimate(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    """``paraplan estimate ARGV --json`` as the command line runs it."""
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("row_id", CASES)
def test_the_cli_prices_memory_as_the_bench(capsys, row_id):
    got = cli_estimate(capsys, CASES[row_id])
    want = bench_stage_gib(row_id)
    assert [s["total_gib"] for s in got["memory"]] == pytest.approx(want, abs=0.1)
    assert got["peak_memory_gib"] == pytest.approx(max(want), abs=0.1)


def test_megatron_core_defaults_add_fp32_main_gradients_on_row_337(capsys):
    """Without the Megatron-Bridge overrides the CLI prices Megatron-core's defaults: fp32
    main gradients (twice the bf16 gradient part on every stage) and the unfused loss's
    fp32 logits (last stage only)."""
    fp8_params = ["--precision", "fp8", "--fp8-recipe", "tensorwise", "--fp8-param-gather"]
    recipe = cli_estimate(capsys, CASES["337"])["memory"]
    default = cli_estimate(capsys, [*LLAMA405_B200, *fp8_params])["memory"]
    for got, want in zip(default[:-1], recipe[:-1], strict=True):
        assert got["parts"]["gradients"] == pytest.approx(2 * want["parts"]["gradients"])
        added = got["total_gib"] - want["total_gib"]
        assert added == pytest.approx(want["parts"]["gradients"], abs=0.01)
    assert default[-1]["parts"]["output_activations"] > recipe[-1]["parts"]["output_activations"]
