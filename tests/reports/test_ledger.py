"""The collective ledger: collectives without recorded sizes show no bytes (never "0 B"),
and the report prints whole call counts."""

from __future__ import annotations

from reports.html_phases import whole_calls
from reports.ledger import join_ledgers, metrics_ledger, timeline_ledger
from specs.timeline import Timeline, TimelineEvent


def _event(rank: int, kind: str, lane: str, size: int, start_s: float) -> TimelineEvent:
    return TimelineEvent(
        rank=rank, lane=lane, name=kind, kind=kind, start_s=start_s, duration_s=0.1, bytes=size
    )


def test_unsized_collectives_have_no_bytes_and_sized_ones_keep_theirs() -> None:
    # rank 0 sends three unsized activations; both ranks all-reduce 1 MB once
    events = [_event(0, "send", "pp", 0, 0.1 * i) for i in range(3)]
    events += [_event(r, "all_reduce", "dp", 1_000_000, 1.0) for r in (0, 1)]
    ledger = timeline_ledger(
        Timeline(source="predicted", events=tuple(events), iteration_time_s=2.0),
        num_ranks=2,
        num_iterations=1,
    )
    assert ledger[("send", "pp")] == (None, 1.5)
    assert ledger[("all_reduce", "dp")] == (1_000_000, 1.0)
    measured = metrics_ledger([{"op": "isend", "group": "pp", "bytes": 0, "count": 3}])
    (row,) = [r for r in join_ledgers(ledger, measured) if r.op == "send"]
    assert row.predicted_bytes is None and row.measured_bytes is None and row.bytes_error is None


def test_call_counts_print_as_whole_calls() -> None:
    assert [whole_calls(c) for c in (1.0, 1.5, 2.4, 1234.0)] == ["1", "2", "2", "1,234"]
