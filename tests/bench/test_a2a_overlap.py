"""bench/a2a_overlap.py: the MoE 1F1B all-to-all overlap against the model zoo's published
H100 ablation (19.7 s without, 17.6 s with) and its overlapped dev-set rows 391 and 393."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

bench = load_bench("a2a_overlap")


def _skip_without_rows() -> None:
    _, error = bench.rows_by_ids(f"390,{bench.ZOO_OVERLAP_ROWS}")
    if error is not None:
        pytest.skip(error)


def test_the_ablation_pair_differs_in_the_overlap_alone():
    pair = (bench.CROSS_NODE, bench.CROSS_NODE_OVERLAP)
    assert [run.a2a_overlap for run in pair] == [False, True]
    assert [run.step_s for run in pair] == [19.7, 17.6]
    plain, overlapped = (vars(run) | {"name": "", "step_s": 0, "a2a_overlap": 0} for run in pair)
    assert plain == overlapped


def test_overlap_entry_sets_both_ratios_only_where_both_times_are_known():
    _skip_without_rows()
    case = bench.h100_case()
    assert case.options.moe_a2a_overlap is False
    entry = bench.overlap_entry("x", case, {"no_overlap": 20.0, "overlap": 15.0})
    pred = entry["predicted_s"]
    assert entry["predicted_ratio"] == pytest.approx(pred["overlap"] / pred["no_overlap"])
    assert entry["published_ratio"] == pytest.approx(0.75)
    assert "published_ratio" not in bench.overlap_entry("y", case, {"overlap": 15.0})


def test_report_covers_the_ablation_and_the_overlapped_rows():
    _skip_without_rows()
    report = bench.overlap_report()
    assert [e["case"] for e in report] == ["h100_ablation", "row 391", "row 393"]
    assert report[0]["published_ratio"] == pytest.approx(17.6 / 19.7)
