"""The fidelity benchmark's arithmetic (`reports.fidelity`) on hand-made rows: signed
errors, percentiles, Kendall's tau, the pick rule, the summary, its JSON and text, and the
spread of repeated runs."""

from __future__ import annotations

import dataclasses

import pytest

from reports.fidelity import (
    COLUMNS,
    kendall_tau,
    median_abs,
    median_run,
    percentile_abs,
    pick_within,
    repeat_spread,
    row_cells,
    row_to_json,
    summarize,
    summary_text,
    summary_to_json,
)
from specs.errors import SpecError
from tests.bench.fidelity_rows import row


def test_errors_are_signed_and_relative_to_the_measurement() -> None:
    r = row("a", measured=0.2, predicted=0.25)
    assert r.time_error == pytest.approx(0.25)  # (0.25 - 0.2) / 0.2
    assert r.memory_error == pytest.approx(0.05)  # (1.05 - 1.0) / 1.0
    assert row("b", measured=0.2, predicted=0.1).time_error == pytest.approx(-0.5)
    missing = row("c", measured=0.2, predicted=None)
    assert missing.time_error is None and missing.memory_error is None


def test_median_and_percentile_of_absolute_errors() -> None:
    assert median_abs([0.1, -0.3, 0.2, None]) == pytest.approx(0.2)
    assert median_abs([None]) is None
    # numpy linear interpolation: 11 evenly spaced values put p90 on the 10th
    assert percentile_abs([i / 10 for i in range(11)], 90) == pytest.approx(0.9)
    # between two values: 0.1 + 0.9 * (0.2 - 0.1)
    assert percentile_abs([-0.1, 0.2], 90) == pytest.approx(0.19)
    assert percentile_abs([], 90) is None
    with pytest.raises(SpecError, match=r"\[0, 100\]"):
        percentile_abs([0.1], 101)


def test_kendall_tau_counts_concordant_pairs() -> None:
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # pairs: (2,3) discordant, the other five concordant: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert kendall_tau([1.0], [2.0]) is None
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None  # one side constant: undefined
    with pytest.raises(SpecError, match="one length"):
        kendall_tau([1, 2], [1])


def test_pick_rule_allows_five_percent() -> None:
    assert pick_within(1.0, [1.0, 2.0])
    assert pick_within(1.04, [1.0, 1.3])
    assert pick_within(1.05, [1.0])  # the boundary is inside
    assert not pick_within(1.06, [1.0, 1.2])
    assert pick_within(0.9, [1.0])  # the pick is itself the fastest


def test_summary_of_hand_made_rows() -> None:
    rows = [
        row("a", measured=1.0, predicted=1.1),  # +10%
        row("b", measured=2.0, predicted=1.6),  # -20%
        row("c", measured=4.0, predicted=4.2),  # +5%
        row("d", measured=3.0, predicted=None),  # refused: no figure uses it
        row("x", measured=0.5, predicted=0.5, group="other"),  # 0%, fastest but elsewhere
    ]
    s = summarize(rows, pick="a")
    assert (s.num_plans, s.num_predicted) == (5, 4)
    assert s.median_abs_error == pytest.approx(0.075)  # median of 0, .05, .1, .2
    assert s.p90_abs_error == pytest.approx(0.17)  # 0.1 + 0.7 * (0.2 - 0.1)
    # memory errors: +0.1, -0.4, +0.2, 0 on 1 GiB
    assert s.memory_median_abs_error == pytest.approx(0.15)
    # predicted order 0.5, 1.1, 1.6, 4.2 matches measured 0.5, 1, 2, 4
    assert s.kendall_tau == pytest.approx(1.0)
    assert s.pick_within_5pct is True  # "a" is the fastest of group g; "x" is not compared
    assert summarize(rows, pick="b").pick_within_5pct is False
    assert summarize(rows).pick_within_5pct is None


def test_summary_rejects_a_pick_that_is_not_a_row() -> None:
    with pytest.raises(SpecError, match="not one of the rows"):
        summarize([row("a", 1.0, 1.0)], pick="z")


def test_json_keys() -> None:
    data = summary_to_json(summarize([row("a", 1.0, 1.2), row("b", 2.0, 1.0)], pick="a"))
    for key in (
        "median_abs_error",
        "p90_abs_error",
        "memory_median_abs_error",
        "kendall_tau",
        "pick_within_5pct",
    ):
        assert key in data
    assert data["kendall_tau"] == pytest.approx(-1.0)
    r = row_to_json(row("a", 1.0, 1.2))
    assert r["iteration_time_error"] == pytest.approx(0.2)
    assert r["measured_iteration_time_s"] == 1.0
    assert r["host_probe_s"] is None


def test_text_cells_and_summary_line() -> None:
    cells = row_cells(row_to_json(row("a", measured=0.2, predicted=0.25)))
    assert cells == ["a", "a", "250.0", "200.0", "+25.0%", "1075.2", "1024.0", "+5.0%", "1"]
    assert len(cells) == len(COLUMNS)
    missing = row_cells(row_to_json(row("b", measured=0.2, predicted=None)))
    assert missing[2] == "n/a" and missing[4] == "n/a"
    text = summary_text(summary_to_json(summarize([row("a", 1.0, 1.1), row("b", 2.0, 1.6)])))
    assert text == (
        "median |time error| 15.0%, p90 19.0%, median |memory error| 25.0%, Kendall tau 1.00, "
        "pick within 5%: n/a (2/2 plans predicted)"
    )


def test_repeat_spread_is_the_median_absolute_deviation_over_the_median() -> None:
    # median 0.21; deviations 0.09, 0.01, 0, 0.01, 0.03 -> median 0.01
    assert repeat_spread([0.3, 0.2, 0.21, 0.22, 0.18]) == pytest.approx(0.01 / 0.21)
    assert repeat_spread([0.2]) is None
    assert repeat_spread([0.2, 0.2]) == 0.0


def test_the_median_run_is_the_middle_one_or_the_lower_middle() -> None:
    assert median_run([0.3, 0.1, 0.2]) == 2
    assert median_run([0.4, 0.1, 0.3, 0.2]) == 3  # lower middle of 0.1 0.2 0.3 0.4
    assert median_run([0.5]) == 0
    with pytest.raises(SpecError, match="without a single run"):
        median_run([])


def test_rows_keep_runs_and_the_summary_the_median_spread() -> None:
    rows = [
        dataclasses.replace(row("a", 1.0, 1.1), runs=3, repeat_spread=0.02),
        dataclasses.replace(row("b", 1.0, 1.1), runs=5, repeat_spread=0.08),
        row("c", 1.0, 1.1),  # one run: no spread
    ]
    data = summary_to_json(summarize(rows))
    assert data["median_repeat_spread"] == pytest.approx(0.05)
    assert row_to_json(rows[1])["runs"] == 5
    assert row_cells(row_to_json(rows[1]))[-1] == "5 (±8.0%)"
    assert summary_text(data).endswith("; median run-to-run spread 5.0%")
    assert summary_to_json(summarize(rows[2:]))["median_repeat_spread"] is None
