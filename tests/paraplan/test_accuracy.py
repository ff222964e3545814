"""`paraplan.accuracy`: the group of published runs that speaks for a job (narrowest with
`MIN_ROWS` runs, then wider, then none), the lines `estimate` and `plan` print and their
``published_accuracy`` JSON, and the shipped table against docs/validation.md."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from paraplan.accuracy import (
    MIN_ROWS,
    AccuracyGroup,
    AccuracyTable,
    ErrorFigures,
    accuracy_json,
    accuracy_lines,
    find_group,
    published_accuracy,
    shipped_table,
)
from paraplan.commands import estimate
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.presets import get_preset
from tests.costmodel.cpu_fixture import cpu_profile
from tests.paraplan.cli_helpers import parse_estimate, run_estimate_json

ROOT = Path(__file__).resolve().parents[2]
H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-8b")
QWEN = get_preset("qwen3-30b-a3b")
BF16 = TrainingJob(seq_length=4096, global_batch_size=64, precision="bf16")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")


def group(
    kind: str | None, precision: str | None, num_rows: int, loso: float = -0.1
) -> AccuracyGroup:
    """A hopper group whose out-of-sample figures are ``loso`` (|.| as median, 2x as p90)."""
    return AccuracyGroup(
        generation="hopper",
        kind=kind,
        precision=precision,
        num_rows=num_rows,
        loso=ErrorFigures(
            median_abs_error=abs(loso), signed_median_error=loso, p90_abs_error=2 * abs(loso)
        ),
        model=ErrorFigures(median_abs_error=0.04, signed_median_error=0.01, p90_abs_error=0.15),
    )


TABLE = AccuracyTable(
    command="python bench/validate_published.py --json",
    num_rows=20,
    groups=(
        group(None, None, 20),
        group("dense", None, 16),
        group("dense", "bf16", MIN_ROWS),
        group("dense", "fp8", MIN_ROWS - 1),
        group("moe", None, MIN_ROWS - 1),
        group("moe", "fp8", MIN_ROWS - 1),
    ),
)


@pytest.mark.parametrize(
    ("kind", "precision", "expected"),
    [
        ("dense", "bf16", ("dense", "bf16")),  # exactly MIN_ROWS: the narrowest group
        ("dense", "fp8", ("dense", None)),  # MIN_ROWS - 1: the generation's dense runs
        ("dense", "nvfp4", ("dense", None)),  # no group of its own
        ("moe", "fp8", (None, None)),  # fewer than MIN_ROWS moe runs: the whole generation
    ],
)
def test_the_narrowest_group_with_min_rows_speaks(kind, precision, expected):
    found = find_group(TABLE, "hopper", kind, precision)
    assert found is not None and (found.kind, found.precision) == expected


def test_min_rows_applies_to_the_generation_too():
    assert find_group(TABLE, "hopper", "moe", "fp8", min_rows=21) is None
    assert find_group(TABLE, "blackwell", "dense", "bf16") is None


def test_lines_give_the_out_of_sample_figures_first_then_the_in_sample_ones():
    accuracy = published_accuracy(LLAMA, BF16, DEFAULT_OPTIONS, H100, TABLE)
    lines = accuracy_lines(accuracy)
    assert lines[0].startswith("accuracy on published runs like this one (docs/validation.md;")
    assert lines[1] == (
        f"  {MIN_ROWS} dense bf16 runs on hopper: |error| median 10.0%, p90 20.0%; "
        "signed median -10.0% (predicted faster than published)"
    )
    assert lines[2] == "  with its own source family in the fit: |error| median 4.0%, p90 15.0%"
    assert len(lines) == 3


def test_a_hybrid_model_is_told_no_published_run_has_its_mamba_layers():
    hybrid = get_preset("nemotron-h-8b")
    lines = accuracy_lines(published_accuracy(hybrid, BF16, DEFAULT_OPTIONS, H100, TABLE))
    assert len(lines) == 4 and "none of them has Mamba-2 or gated DeltaNet layers" in lines[3]
    b200 = load_profile("b200")
    options = device_options(DEFAULT_OPTIONS, b200)
    alone = accuracy_lines(published_accuracy(hybrid, BF16, options, b200, TABLE))
    assert len(alone) == 2 and "Mamba-2" in alone[1]
    assert len(accuracy_lines(published_accuracy(LLAMA, BF16, DEFAULT_OPTIONS, H100, TABLE))) == 3


def test_a_latent_moe_model_is_told_no_published_run_has_its_latent_layers():
    latent = get_preset("qwen3-30b-a3b").replace(name="qwen3-latent", moe_latent_size=512)
    accuracy = published_accuracy(latent, BF16, DEFAULT_OPTIONS, H100, TABLE)
    lines = accuracy_lines(accuracy)
    assert len(lines) == 4 and "none of them has latent MoE layers" in lines[3]
    data = accuracy_json(accuracy)
    assert data is not None and data["latent_moe"] is True and data["hybrid"] is False
    qwen = published_accuracy(get_preset("qwen3-30b-a3b"), BF16, DEFAULT_OPTIONS, H100, TABLE)
    assert len(accuracy_lines(qwen)) == 3


def test_a_wider_group_says_why():
    fp8 = accuracy_lines(published_accuracy(LLAMA, FP8, DEFAULT_OPTIONS, H100, TABLE))
    assert fp8[1].startswith(
        f"  16 dense runs on hopper, every precision (fewer than {MIN_ROWS} are fp8):"
    )
    moe = accuracy_lines(published_accuracy(QWEN, FP8, DEFAULT_OPTIONS, H100, TABLE))
    assert moe[1].startswith(
        f"  20 runs on hopper, dense and moe, every precision (fewer than {MIN_ROWS} are moe):"
    )


def test_a_generation_without_runs_gets_one_line_and_a_json_without_group():
    b200 = load_profile("b200")
    accuracy = published_accuracy(LLAMA, BF16, device_options(DEFAULT_OPTIONS, b200), b200, TABLE)
    assert accuracy_lines(accuracy) == [
        "accuracy on published runs: no published run on blackwell checks these figures "
        "(docs/validation.md)"
    ]
    data = accuracy_json(accuracy)
    assert data is not None and data["group"] is None and data["generation"] == "blackwell"


def test_nothing_for_the_torch_runtime_or_a_cpu_profile():
    torch_options = dataclasses.replace(DEFAULT_OPTIONS, runtime="torch")
    assert published_accuracy(LLAMA, BF16, torch_options, H100, TABLE) is None
    assert published_accuracy(LLAMA, BF16, DEFAULT_OPTIONS, cpu_profile(), TABLE) is None
    assert accuracy_lines(None) == [] and accuracy_json(None) is None


def test_the_shipped_table_counts_the_rows_of_docs_validation():
    # the summary table near the top of the page: "| model | 241 | ..."; a page regenerated
    # without the table (or the other way round) fails here
    head = (ROOT / "docs" / "validation.md").read_text().splitlines()[:20]
    (count,) = [int(m.group(1)) for line in head if (m := re.match(r"\| model \| (\d+) \|", line))]
    table = shipped_table()
    assert table.num_rows == count
    by_generation = [g for g in table.groups if g.kind is None and g.precision is None]
    assert sum(g.num_rows for g in by_generation) == count


def test_estimate_prints_the_block_and_gives_it_in_json(capsys):
    base = ["--model", "llama3-8b", "--num-gpus", "16", "--seq-len", "8192"]
    base += ["--global-batch", "64", "--tp", "4"]
    assert estimate.run(parse_estimate(base)) == 0
    out = capsys.readouterr().out
    expected = find_group(shipped_table(), "hopper", "dense", "bf16")
    assert expected is not None
    assert "accuracy on published runs like this one" in out
    assert f"  {expected.num_rows} dense bf16 runs on hopper: |error| median" in out
    data = run_estimate_json(capsys, base)
    assert data["published_accuracy"]["group"] == dataclasses.asdict(expected)
    torch = run_estimate_json(capsys, base, "--runtime", "torch")
    assert torch["published_accuracy"] is None


def test_a_sparse_attention_model_is_told_its_mfu_counts_dense_attention():
    accuracy = published_accuracy(get_preset("glm-5.1"), BF16, DEFAULT_OPTIONS, H100, TABLE)
    lines = accuracy_lines(accuracy)
    assert len(lines) == 4 and "DeepSeek sparse attention" in lines[3]
    assert "dense causal attention" in lines[3]
    data = accuracy_json(accuracy)
    assert data is not None and data["sparse_attention"] is True and data["latent_moe"] is False
    deepseek = published_accuracy(get_preset("deepseek-v3"), BF16, DEFAULT_OPTIONS, H100, TABLE)
    assert accuracy_json(deepseek)["sparse_attention"] is False
