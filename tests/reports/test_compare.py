"""Alignment and error arithmetic of `reports.compare` and `reports.phase_seconds` on
hand-made timelines.

Every expected value below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.compare import (
    align,
    compare,
    comparison_to_json,
    memory_errors,
    relative_error,
    verdict_for,
)
from reports.ledger import (
    join_ledgers,
    metrics_ledger,
    normalize_group,
    normalize_op,
    timeline_ledger,
)
from reports.phase_seconds import (
    PHASES,
    covered_s,
    iterations_in,
    merge_intervals,
    overlap_s,
    rank_phase_seconds,
)
from specs.errors import SpecError
from specs.plan import ParallelPlan
from specs.timeline import Timeline, TimelineEvent


def ev(lane: str, kind: str, start: float, dur: float, **kw: object) -> TimelineEvent:
    kw.setdefault("rank", 0)
    return TimelineEvent(
        lane=lane,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        name=f"{kind} {start}",
        start_s=start,
        duration_s=dur,
        **kw,  # type: ignore[arg-type]
    )


def one_rank_events(rank: int = 0, scale: float = 1.0, shift: float = 0.0) -> list[TimelineEvent]:
    """F [0,2], B [3,7], tp all-reduce [1,2.5], dp reduce-scatter [6,8], optimizer [8,9]."""
    s = scale
    return [
        ev("compute", "forward", shift + 0 * s, 2 * s, rank=rank, microbatch=0),
        ev("compute", "backward", shift + 3 * s, 4 * s, rank=rank, microbatch=0),
        ev("tp", "all_reduce", shift + 1 * s, 1.5 * s, rank=rank, bytes=100, group="tp"),
        ev("dp", "reduce_scatter", shift + 6 * s, 2 * s, rank=rank, bytes=400, group="dp"),
        ev("optimizer", "optimizer", shift + 8 * s, 1 * s, rank=rank),
    ]


# ---- interval arithmetic -------------------------------------------------------------


def test_merge_and_overlap_by_hand() -> None:
    merged = merge_intervals([(3, 4), (0, 1), (0.5, 2), (2, 2.5)])
    assert merged == [(0, 2.5), (3, 4)]  # touching intervals join
    assert covered_s(merged) == pytest.approx(3.5)
    assert overlap_s(merged, [(1, 3.5)]) == pytest.approx(1.5 + 0.5)


intervals = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 10)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


@settings(max_examples=100, deadline=None)
@given(intervals, intervals)
def test_inclusion_exclusion(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    # |A ∪ B| = |A| + |B| - |A ∩ B| for unions of intervals.
    ma, mb = merge_intervals(a), merge_intervals(b)
    union = covered_s(merge_intervals(a + b))
    assert union == pytest.approx(covered_s(ma) + covered_s(mb) - overlap_s(ma, mb))
    assert overlap_s(ma, mb) == pytest.approx(overlap_s(mb, ma))


def test_relative_error_and_verdict() -> None:
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.9, 1.0) == pytest.approx(-0.1)
    assert relative_error(1.0, 0.0) is None
    assert verdict_for(0.05) == "within 5%"
    assert verdict_for(-0.0501) == "within 15%"
    assert verdict_for(0.15) == "within 15%"
    assert verdict_for(-0.2) == "off"
    assert verdict_for(None) == "unmeasured"


# ---- phases of one rank --------------------------------------------------------------


def test_rank_phases_exposed_comm_and_bubble() -> None:
    phases = rank_phase_seconds(one_rank_events(), iteration_time_s=10.0)
    assert phases["forward"] == pytest.approx(2.0)
    assert phases["backward"] == pytest.approx(4.0)
    assert phases["optimizer"] == pytest.approx(1.0)
    assert phases["tp_exposed"] == pytest.approx(0.5)  # [1,2.5] minus F [0,2] -> [2,2.5]
    assert phases["dp_exposed"] == pytest.approx(1.0)  # [6,8] minus B [3,7], opt [8,9]
    # busy union [0,2.5] + [3,9] = 8.5 s of a 10 s iteration
    assert phases["bubble"] == pytest.approx(1.5)
    assert sum(phases.values()) == pytest.approx(10.0)  # lanes do not overlap each other here
    assert set(phases) == set(PHASES)


def test_comm_hidden_behind_the_optimizer_and_bubble_events_ignored() -> None:
    events = [
        ev("optimizer", "optimizer", 0, 2),
        ev("dp", "all_gather", 1, 2, group="dp"),  # hidden on [1,2], exposed on [2,3]
        ev("compute", "bubble", 3, 5),  # a predicted bubble marker is idle time, not work
    ]
    phases = rank_phase_seconds(events, iteration_time_s=8.0)
    assert phases["dp_exposed"] == pytest.approx(1.0)
    assert phases["bubble"] == pytest.approx(5.0)  # 8 - busy [0,3]


def test_nested_events_of_one_kind_are_not_double_counted() -> None:
    events = [ev("compute", "forward", 0, 4), ev("compute", "forward", 1, 1)]
    assert rank_phase_seconds(events, iteration_time_s=4.0)["forward"] == pytest.approx(4.0)


def test_iterations_in_a_timeline() -> None:
    one = Timeline(source="measured", events=tuple(one_rank_events()), iteration_time_s=10.0)
    assert iterations_in(one) == 1
    two = Timeline(
        source="measured",
        events=tuple(one_rank_events() + one_rank_events(shift=10.0)),
        iteration_time_s=10.0,
    )
    assert iterations_in(two) == 2
    # a single step 1.6x slower than the median is still one step
    slow = Timeline(source="measured", events=tuple(one_rank_events(scale=1.6)), iteration_time_s=9)
    assert iterations_in(slow) == 1
    assert iterations_in(Timeline(source="measured")) == 1


# ---- compare -------------------------------------------------------------------------


def timelines(measured_scale: float = 1.0) -> tuple[Timeline, Timeline]:
    predicted = Timeline(
        source="predicted",
        events=tuple(one_rank_events(0) + one_rank_events(1)),
        iteration_time_s=10.0,
    )
    measured = Timeline(
        source="measured",
        events=tuple(one_rank_events(0, measured_scale) + one_rank_events(1, measured_scale)),
        iteration_time_s=10.0 * measured_scale,
    )
    return predicted, measured


def test_compare_iteration_and_phase_errors() -> None:
    predicted, measured = timelines(measured_scale=1.25)
    c = compare(predicted, measured)
    assert c.iteration_time_error == pytest.approx((10 - 12.5) / 12.5)  # -0.2
    assert c.verdict == "off"
    assert c.ranks == (0, 1)
    by_phase = {p.phase: p for p in c.phases}
    # every phase scales by 1.25, so every error is 1/1.25 - 1 = -0.2
    for name in ("forward", "backward", "optimizer", "tp_exposed", "dp_exposed", "bubble"):
        assert by_phase[name].measured_s == pytest.approx(by_phase[name].predicted_s * 1.25)
        assert by_phase[name].error == pytest.approx(-0.2)
    assert "recompute" not in by_phase  # absent on both sides
    assert [p.phase for p in c.phases] == [p for p in PHASES if p in by_phase]
    assert len(c.rank_phases) == 2 * len(c.phases)


def test_phase_on_one_side_only_and_rank_averaging() -> None:
    predicted, measured = timelines()
    extra = ev("compute", "recompute", 2, 1, rank=1, microbatch=0)  # predicted on rank 1 only
    predicted = Timeline(
        source="predicted", events=(*predicted.events, extra), iteration_time_s=10.0
    )
    c = compare(predicted, measured)
    recompute = next(p for p in c.phases if p.phase == "recompute")
    assert recompute.predicted_s == pytest.approx(0.5)  # 1 s on rank 1, 0 on rank 0
    assert recompute.measured_s == 0.0
    assert recompute.error is None
    assert c.verdict == "within 5%"
    # on rank 1 the recompute fills [2,3]: busy [0,9], bubble 1.0 (1.5 on rank 0), and it
    # hides the tp tail [2,2.5] (exposed 0 there, 0.5 on rank 0)
    by_phase = {p.phase: p for p in c.phases}
    assert by_phase["bubble"].predicted_s == pytest.approx((1.5 + 1.0) / 2)
    assert by_phase["bubble"].measured_s == pytest.approx(1.5)
    assert by_phase["tp_exposed"].predicted_s == pytest.approx((0.5 + 0.0) / 2)
    rank1 = {p.phase: p for p in c.rank_phases if p.rank == 1}
    assert rank1["tp_exposed"].predicted_s == 0.0
    assert rank1["tp_exposed"].error == pytest.approx(-1.0)


def test_measured_timeline_with_two_iterations() -> None:
    predicted, _ = timelines()
    measured = Timeline(
        source="measured",
        events=tuple(one_rank_events(0) + one_rank_events(0, shift=10.0)),
        iteration_time_s=10.0,
    )
    c = compare(predicted, measured)
    assert c.ranks == (0,)  # rank 1 is predicted only
    assert c.measured_iterations == 2
    assert all(p.error == pytest.approx(0.0) for p in c.phases)
    fwd = next(s for s in c.alignment if s.kind == "forward")
    assert fwd.predicted_s == pytest.approx(2.0)
    assert fwd.measured_s == pytest.approx(2.0)  # 4 s over 2 iterations


def test_compare_rejects_swapped_sources_and_disjoint_ranks() -> None:
    predicted, measured = timelines()
    with pytest.raises(SpecError, match="predicted timeline first"):
        compare(measured, predicted)
    other = Timeline(source="measured", events=tuple(one_rank_events(7)), iteration_time_s=10.0)
    with pytest.raises(SpecError, match="no rank in common"):
        compare(predicted, other)


def test_alignment_by_rank_lane_kind_microbatch_chunk() -> None:
    predicted = Timeline(
        source="predicted",
        events=(
            ev("compute", "forward", 0, 1, microbatch=0, chunk=0),
            ev("compute", "forward", 1, 1, microbatch=0, chunk=1),
            ev("compute", "backward", 2, 2, microbatch=0, chunk=1),
            ev("compute", "bubble", 4, 1),
        ),
        iteration_time_s=5.0,
    )
    measured = Timeline(
        source="measured",
        events=(
            ev("compute", "forward", 0, 0.5, microbatch=0, chunk=0),  # two layers, one key
            ev("compute", "forward", 0.5, 0.7, microbatch=0, chunk=0),
            ev("compute", "forward", 1.2, 1, microbatch=0, chunk=1),
            ev("compute", "forward", 2.2, 1, microbatch=1, chunk=0),
        ),
        iteration_time_s=5.0,
    )
    spans = {(s.kind, s.microbatch, s.chunk): s for s in align(predicted, measured)}
    assert spans[("forward", 0, 0)].predicted_s == pytest.approx(1.0)
    assert spans[("forward", 0, 0)].measured_s == pytest.approx(1.2)
    assert spans[("forward", 0, 1)].measured_s == pytest.approx(1.0)
    assert spans[("backward", 0, 1)].measured_s is None  # predicted only
    assert spans[("forward", 1, 0)].predicted_s is None  # measured only
    assert ("bubble", None, None) not in spans
    alignment = comparison_to_json(compare(predicted, measured))["alignment"]
    assert (alignment["matched"], alignment["predicted_only"], alignment["measured_only"]) == (
        2,
        1,
        1,
    )


# ---- memory and collectives ----------------------------------------------------------


def test_memory_errors_map_ranks_to_pipeline_stages() -> None:
    plan = ParallelPlan(tp=2, pp=2, dp=1)  # ranks 0,1 on stage 0; ranks 2,3 on stage 1
    estimate = {
        "peak_memory_gib": 10.0,
        "memory": [{"stage": 0, "total_gib": 10.0}, {"stage": 1, "total_gib": 6.0}],
    }
    rows = memory_errors(estimate, [8.0, 8.0, 6.0, 5.0], plan)
    assert [r.stage for r in rows] == [0, 0, 1, 1]
    assert [r.predicted_gib for r in rows] == [10.0, 10.0, 6.0, 6.0]
    assert rows[0].error == pytest.approx(0.25)  # (10 - 8) / 8
    assert rows[3].error == pytest.approx(0.2)  # (6 - 5) / 5
    assert [r.predicted_gib for r in memory_errors(estimate, [8.0], None)] == [10.0]
    with pytest.raises(SpecError, match="total_gib"):
        memory_errors({"peak_memory_gib": 1.0, "memory": [{"stage": 0}]}, [1.0], plan)


def test_op_and_group_spellings_meet() -> None:
    assert normalize_op("all_gather_into_tensor") == "all_gather"
    assert normalize_op("_allgather_base") == "all_gather"
    assert normalize_op("reduce_scatter_tensor") == "reduce_scatter"
    assert normalize_op("ALLREDUCE") == "all_reduce"
    assert normalize_op("all_to_all_single") == "all_to_all"
    assert normalize_op("isend") == "send"
    assert normalize_group("dp-cp") == "cp-dp"
    assert normalize_group("pp") == "pp"


def test_ledger_predicted_vs_measured() -> None:
    predicted, _ = timelines()
    # per rank per iteration: one tp all-reduce of 100 B, one dp reduce-scatter of 400 B
    p = timeline_ledger(predicted, num_ranks=2, num_iterations=1)
    assert p == {("all_reduce", "tp"): (100.0, 1.0), ("reduce_scatter", "dp"): (400.0, 1.0)}
    m = metrics_ledger(
        [
            {"op": "allreduce", "group": "tp", "bytes": 80, "count": 1},
            {"op": "all_reduce", "group": "tp", "bytes": 40, "count": 1},
            {"op": "all_gather_into_tensor", "group": "dp", "bytes": 400, "count": 2},
        ]
    )
    rows = {(r.op, r.group): r for r in join_ledgers(p, m)}
    assert rows[("all_reduce", "tp")].measured_bytes == 120.0
    assert rows[("all_reduce", "tp")].measured_count == 2.0
    assert rows[("all_reduce", "tp")].bytes_error == pytest.approx((100 - 120) / 120)
    assert rows[("reduce_scatter", "dp")].measured_bytes is None  # predicted only
    assert rows[("reduce_scatter", "dp")].bytes_error is None
    assert rows[("all_gather", "dp")].predicted_bytes is None  # measured only
    assert [r.group for r in join_ledgers(p, m)] == ["tp", "dp", "dp"]
    with pytest.raises(SpecError, match="collectives\\[0\\]"):
        metrics_ledger([{"op": "send"}])


def test_comparison_json_has_the_documented_keys() -> None:
    predicted, measured = timelines(measured_scale=1.02)
    estimate = {"peak_memory_gib": 9.0}
    metrics = {
        "iteration_time_s": [10.2],
        "peak_memory_gib": [10.0, 8.0],
        "collectives": [{"op": "all_reduce", "group": "tp", "bytes": 100, "count": 1}],
    }
    c = compare(predicted, measured, estimate=estimate, metrics=metrics)
    data = json.loads(json.dumps(comparison_to_json(c)))
    assert data["iteration_time_predicted_s"] == pytest.approx(10.0)
    assert data["iteration_time_measured_s"] == pytest.approx(10.2)
    assert data["iteration_time_error"] == pytest.approx((10 - 10.2) / 10.2)
    assert data["verdict"] == "within 5%"
    assert data["peak_memory_error"] == pytest.approx((9 - 10) / 10)  # against the fullest rank
    assert [m["rank"] for m in data["memory"]] == [0, 1]
    assert {tuple(p) for p in (e.keys() for e in data["phases"])} == {
        ("phase", "predicted_s", "measured_s", "error")
    }
    ledger = {(r["op"], r["group"]): r for r in data["ledger"]}
    assert ledger[("all_reduce", "tp")]["bytes_error"] == pytest.approx(0.0)
    assert ledger[("reduce_scatter", "dp")]["measured_bytes"] is None
