"""bench/validation_stats.py: quantiles, the summary figures, and Kendall's tau over
strategies inside row groups (release, printed precision, GPU count, global batch)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import synthetic_outcome

stats = load_bench("validation_stats")


def test_quantile_matches_linear_interpolation():
    values = [0.1, 0.4, 0.2, 0.3]
    assert stats.quantile(values, 0.5) == pytest.approx(0.25)
    assert stats.quantile(values, 0.9) == pytest.approx(0.37)
    assert stats.quantile([0.5], 0.9) == 0.5


def test_summary_figures():
    outcomes = [synthetic_outcome(str(i), "S", 1.0, p) for i, p in enumerate([0.8, 1.1, 1.3])]
    result = stats.summary(outcomes)
    assert result["median_abs_error"] == pytest.approx(0.2)
    assert result["signed_median_error"] == pytest.approx(0.1)
    assert result["fit_fraction"] == 1.0


def test_kendall_tau_counts_pairs_inside_groups():
    same = [
        synthetic_outcome("1", "S", 1.0, 1.0),
        synthetic_outcome("2", "S", 2.0, 2.5),
        synthetic_outcome("3", "S", 3.0, 2.0),
    ]
    # pairs (1,2) and (1,3) concordant, (2,3) discordant: tau = (2 - 1) / 3
    other = [synthetic_outcome("4", "S", 1.0, 5.0, model="n")]
    result = stats.kendall_tau(same + other)
    assert result["kendall_tau"] == pytest.approx(1 / 3)
    assert result["pairs"] == 3
    assert list(result["groups"]) == [stats.strategy_key(same[0])]


def test_strategy_groups_split_release_and_printed_precision():
    # Each row differs from the first in source release or printed FP8 recipe only, and is
    # ordered against it the wrong way: no group holds two strategies.
    base = synthetic_outcome("1", "MBRIDGE-26.04", 1.0, 2.0)
    others = [
        synthetic_outcome("2", "MBRIDGE-26.06", 2.0, 1.0),
        synthetic_outcome("4", "MBRIDGE-26.04", 2.0, 1.0, precision_text="MXFP8"),
    ]
    result = stats.kendall_tau([base, *others])
    assert result["pairs"] == 0 and result["groups"] == {}
    assert len({stats.strategy_key(o) for o in [base, *others]}) == 3


def test_fine_tuning_tasks_are_groups_of_their_own():
    # A LoRA run and a full fine-tuning of the same model, release, GPU and precision train
    # different parameters: their published order is not a choice of plan.
    sft = dataclasses.replace(synthetic_outcome("1", "MBRIDGE-26.06", 1.0, 2.0), task="sft")
    lora = dataclasses.replace(
        synthetic_outcome("2", "MBRIDGE-26.06", 2.0, 1.0, gpus=2), task="lora"
    )
    pretrain = synthetic_outcome("3", "MBRIDGE-26.06", 2.0, 1.0, gpus=4)
    assert len({stats.strategy_key(o) for o in (sft, lora, pretrain)}) == 3
    assert stats.strategy_key(pretrain).endswith("bf16")
    assert stats.kendall_tau([sft, lora, pretrain])["pairs"] == 0


def test_gpu_count_is_a_strategy_within_a_group():
    # The same model at two data-parallel sizes (MegaScale's and SC21's Table 2 groups):
    # one group, two strategies compared by tokens/s per GPU.
    small = synthetic_outcome("1", "MBRIDGE-26.04", 1.0, 2.0)
    large = synthetic_outcome("3", "MBRIDGE-26.04", 2.0, 1.0, gpus=16)
    assert stats.strategy_key(small) == stats.strategy_key(large)
    assert stats.strategy_of(small) != stats.strategy_of(large)
    assert stats.kendall_tau([small, large])["pairs"] == 1


def test_identical_strategies_are_one_averaged_strategy():
    # Plan "a" published twice (1 s and 3 s: mean rate (1 + 1/3) / 2 = 2/3 of 1 s), plan "b"
    # once at 1.2 s (rate 5/6): b is faster on the published average, slower predicted.
    rows = [
        synthetic_outcome("1", "S", 1.0, 1.0, plan="a"),
        synthetic_outcome("2", "S", 3.0, 1.0, plan="a"),
        synthetic_outcome("3", "S", 1.2, 2.0, plan="b"),
    ]
    result = stats.kendall_tau(rows)
    assert result["pairs"] == 1
    assert result["kendall_tau"] == pytest.approx(-1.0)
    rates = stats.strategy_rates(rows)
    tokens = 4096 / 8  # one sequence of 4096 tokens per iteration, 8 GPUs
    assert rates["8 GPUs | a | gbs None"][0] == pytest.approx(tokens * 2 / 3)
    assert rates["8 GPUs | b | gbs None"][0] == pytest.approx(tokens / 1.2)


def test_global_batch_enters_the_throughput():
    # Same plan at 2 and 1 sequences per iteration: 1.5 s vs 1 s published (4/3 vs 1
    # sequence per second), 1.9 s vs 1 s predicted (1.05 vs 1): the same order.
    rows = [
        synthetic_outcome("1", "S", 1.5, 1.9, plan="a", gbs=2),
        synthetic_outcome("2", "S", 1.0, 1.0, plan="a", gbs=1),
    ]
    result = stats.kendall_tau(rows)
    assert result["pairs"] == 1 and result["kendall_tau"] == pytest.approx(1.0)
