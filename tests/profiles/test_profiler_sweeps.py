"""The profiler's timing statistics and sweep plans (`profiles.profiler.timing`,
`profiles.profiler.shapes`) on synthetic data with known answers (no ranks)."""

from __future__ import annotations

import dataclasses

import pytest

from profiles.profiler.shapes import candidate_tp, holdout, model_gemms, sweep_plan
from profiles.profiler.timing import (
    QUICK_BUDGET,
    CollectiveTiming,
    GemmTiming,
    repeat_plan,
    spread,
    steal_watched,
    typical_s,
    unstolen,
)
from specs.presets import get_preset


def test_typical_figure_is_the_median_for_compute_and_the_fastest_for_collectives() -> None:
    times = (5.0, 1.0, 2.0, 9.0, 3.0)
    g = GemmTiming(dtype="fp32", m=8, n=8, k=8, pattern="linear", times_s=times)
    c = CollectiveTiming(
        op="all_reduce",
        group_size=2,
        placement="intra",
        size_bytes=8,
        concurrent_groups=1,
        times_s=times,
    )
    assert (typical_s(g), typical_s(c)) == (3.0, 1.0)
    # eleven samples with one lucky outlier: the collective reads the fastest fifth's edge
    lucky = (0.2, 3.1, 3.0, 3.3, 5.0, 3.2, 9.0, 3.4, 4.0, 6.0, 3.5)
    assert typical_s(dataclasses.replace(c, times_s=lucky)) == 3.1
    s = spread("q", times)
    assert (s.num_samples, s.min, s.max, s.mean, s.median) == (5, 1.0, 9.0, 4.0, 3.0)


def test_a_window_is_stolen_when_the_steal_counter_moved_during_it() -> None:
    readings = iter([1.0, 1.0, 1.0, 1.01, None, 2.0])
    assert steal_watched(lambda: "quiet", readings.__next__) == ("quiet", False)
    assert steal_watched(lambda: "stolen", readings.__next__) == ("stolen", True)
    # no steal column (not a Linux guest): never stolen
    assert steal_watched(lambda: "unknown", readings.__next__) == ("unknown", False)
    assert unstolen([("a", False), ("b", True), ("c", False)]) == ["a", "c"]
    # stolen in every window: all of them, the only figures there are
    assert unstolen([("d", True), ("e", True)]) == ["d", "e"]


def test_repeat_plan_loops_tiny_operators_and_caps_large_ones() -> None:
    budget = QUICK_BUDGET
    inner, repeats = repeat_plan(1e-6, budget)
    assert inner * 1e-6 >= budget.min_sample_s and repeats <= budget.max_repeats
    assert repeat_plan(10.0, budget) == (1, budget.min_repeats)


@pytest.mark.parametrize("count", range(0, 40))
def test_holdout_never_drops_the_ends(count: int) -> None:
    mask = holdout(count)
    assert len(mask) == count
    if count:
        assert not mask[0] and not mask[-1]
    assert sum(mask) <= count // 4 + 1


def test_model_gemms_follow_megatron_per_rank_shapes() -> None:
    tiny = get_preset("tiny")  # h 128, 4 heads of 32, 2 query groups, ffn 256, vocab 512
    assert candidate_tp(tiny, 2) == (1, 2)
    assert candidate_tp(tiny, 8) == (1, 2)  # 2 query groups cap TP at 2
    shapes = set(model_gemms(tiny, "fp32", (512,), 2))
    assert ("fp32", 512, (4 + 2 * 2) * 32 // 2, 128, "linear") in shapes  # QKV at tp 2
    assert ("fp32", 512, 128, 256 // 2, "linear") in shapes  # MLP down at tp 2
    assert ("fp32", 512, 512, 128, "linear") in shapes  # logits at tp 1 (512 = 4·128)
    assert ("fp32", 256, 128, 512, "wgrad") in shapes  # its weight gradient
    assert ("fp32", 512, 128, 256, "dgrad") in shapes


def test_quick_cpu_plan_covers_small_shapes_densely() -> None:
    plan = sweep_plan(cuda=False, quick=True, model=get_preset("tiny"), world_size=2)
    fp32 = [s for s in plan.gemms if s[0] == "fp32"]
    small = [s for s in fp32 if 2 * s[1] * s[2] * s[3] <= 0.05e9]
    assert len(small) >= 40  # the tiny models' GEMMs are a few MFLOP
    assert min(plan.message_bytes) == 1024 and max(plan.message_bytes) >= 2**22
    assert any(a[4] == 32 for a in plan.attention)  # the tiny model's head dim
