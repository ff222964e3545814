"""The planner's order of simulated plans (`planner.ranking.order_plans`)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from planner.ranking import RANK_TOLERANCE, order_plans, simplicity
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class Scored:
    plan: ParallelPlan
    tokens_per_s: float
    peak_bytes: float


def _order(items: list[Scored], tolerance: float = RANK_TOLERANCE) -> list[Scored]:
    return order_plans(
        items,
        plan=lambda x: x.plan,
        tokens_per_s=lambda x: x.tokens_per_s,
        peak_memory_bytes=lambda x: x.peak_bytes,
        tolerance=tolerance,
    )


plans = st.builds(
    ParallelPlan,
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    vpp=st.sampled_from([1, 2]),
    cp=st.sampled_from([1, 2]),
)
scored = st.builds(
    Scored,
    plan=plans,
    tokens_per_s=st.floats(min_value=1.0, max_value=2.0),
    peak_bytes=st.floats(min_value=1.0, max_value=100.0),
)


@given(st.lists(scored, max_size=12), st.floats(min_value=0.0, max_value=0.1))
def test_order_is_a_permutation_independent_of_input_order(
    items: list[Scored], tolerance: float
) -> None:
    ordered = _order(items, tolerance)
    assert sorted(map(id, ordered)) == sorted(map(id, items))

    def key(x: Scored) -> tuple[float, float, tuple[int, int, int]]:
        return (x.tokens_per_s, x.peak_bytes, simplicity(x.plan))

    assert [key(x) for x in _order(list(reversed(items)), tolerance)] == [key(x) for x in ordered]


@given(st.lists(scored, max_size=12), st.floats(min_value=0.0, max_value=0.1))
def test_a_plan_beyond_the_tolerance_always_ranks_first(
    items: list[Scored], tolerance: float
) -> None:
    ordered = _order(items, tolerance)
    for i, earlier in enumerate(ordered):
        for later in ordered[i + 1 :]:
            assert not later.tokens_per_s > earlier.tokens_per_s * (1 + tolerance)


@given(st.lists(scored, max_size=12))
def test_zero_tolerance_is_the_throughput_order(items: list[Scored]) -> None:
    speeds = [x.tokens_per_s for x in _order(items, 0.0)]
    assert speeds == sorted(speeds, reverse=True)


def test_the_simpler_plan_wins_a_near_tie() -> None:
    cp = Scored(plan=ParallelPlan(tp=8, cp=2), tokens_per_s=1.005, peak_bytes=1.0)
    flat = Scored(plan=ParallelPlan(tp=8, pp=2), tokens_per_s=1.0, peak_bytes=1.0)
    interleaved = Scored(plan=ParallelPlan(tp=8, pp=2, vpp=2), tokens_per_s=1.01, peak_bytes=1.0)
    assert _order([cp, interleaved, flat]) == [flat, interleaved, cp]


def test_a_clear_gain_beats_simplicity() -> None:
    cp = Scored(
        plan=ParallelPlan(tp=8, cp=2), tokens_per_s=1.0 + 2 * RANK_TOLERANCE, peak_bytes=1.0
    )
    flat = Scored(plan=ParallelPlan(tp=8), tokens_per_s=1.0, peak_bytes=1.0)
    assert _order([flat, cp]) == [cp, flat]
