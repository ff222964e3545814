"""The machine's steal time in a run folder's metrics (`executor.run_folder.steal_metrics`)."""

from __future__ import annotations

import pytest

from executor.measure import RankTrace
from executor.run_folder import RankReport, steal_metrics


def _report(rank: int, times_s: tuple[float, ...], steal: tuple[float, ...]) -> RankReport:
    return RankReport(
        rank=rank,
        times_s=times_s,
        probe_s=(),
        steal=steal,
        losses=(),
        warmup_losses=(),
        peak_memory_bytes=0,
        trace=RankTrace(rank=rank, steps={}, events=(), memory_peak_bytes=0),
    )


def test_steal_metrics_take_each_steps_largest_share_and_weigh_the_timed_ones() -> None:
    reports = [
        _report(0, (1.0, 3.0, 2.0), (0.0, 0.10, 0.5)),
        _report(1, (1.0, 3.0, 2.0), (0.02, 0.05, 0.4)),
    ]
    m = steal_metrics(reports, [1.0, 3.0], [0, 1])
    assert m["host_steal"] == [0.02, 0.10, 0.5]
    # (0.02 * 1 + 0.10 * 3) / 4: the profiled third step left out
    assert m["host_steal_timed"] == pytest.approx(0.08)


def test_steal_metrics_are_empty_where_a_rank_could_not_read_steal() -> None:
    reports = [_report(0, (1.0,), (0.1,)), _report(1, (1.0,), ())]
    assert steal_metrics(reports, [1.0], [0]) == {}
