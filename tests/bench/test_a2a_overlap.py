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


def test_graph_mode_names_how_much_of_the_step_is_captured():
    from costmodel.execution import ExecutionOptions

    def mode(scopes: set[str]) -> str:
        return bench.graph_mode(ExecutionOptions(cuda_graph_scopes=frozenset(scopes)))

    assert mode(set()) == "eager"
    assert mode({"attn", "moe_router"}) == "partial"
    assert mode({"full_iteration"}) == "full_iteration"


def test_by_graph_mode_takes_the_median_of_each_side_per_mode():
    def entry(mode: str, with_err: float, without_err: float) -> dict[str, object]:
        return {"graph_mode": mode, "error": {"overlap": with_err, "no_overlap": without_err}}

    entries = [
        entry("eager", -0.3, -0.2),
        entry("eager", -0.1, 0.0),
        entry("eager", -0.2, 0.4),
        entry("full_iteration", 0.05, 0.25),
    ]
    groups = bench.by_graph_mode(entries)
    assert list(groups) == ["full_iteration", "eager"]
    assert groups["eager"]["rows"] == 3
    assert groups["eager"]["median_error"] == pytest.approx({"overlap": -0.2, "no_overlap": 0.0})
    assert groups["full_iteration"]["median_error"]["no_overlap"] == pytest.approx(0.25)


def test_overlapped_dev_rows_are_the_recipes_that_set_the_overlap():
    _skip_without_rows()
    rows = bench.overlapped_dev_rows()
    ids = {e["row_id"] for e in rows}
    assert {"391", "393"} <= ids
    assert "390" not in ids  # the model zoo's GB200 BF16 run does not set A2A_OVERLAP
    for e in rows:
        assert e["graph_mode"] in bench.GRAPH_MODES
        published = e["published_s"]["overlap"]
        for side, seconds in e["predicted_s"].items():
            assert e["error"][side] == pytest.approx(seconds / published - 1.0)
    modes = {e["row_id"]: e["graph_mode"] for e in rows}
    assert modes["391"] == modes["393"] == "partial"


def test_the_estimate_caveat_quotes_what_the_rows_give_now():
    _skip_without_rows()
    from paraplan.time_assumptions import HOST_DRIVEN_OVERLAP_LINE

    rows = bench.overlapped_dev_rows()
    host = [e["error"]["overlap"] for e in rows if e["graph_mode"] != "full_iteration"]
    groups = bench.by_graph_mode(rows)
    lo, hi = sorted(-e for e in host)[0], sorted(-e for e in host)[-1]
    assert f"{len(host)} dev-set rows predicted {lo * 100:.0f}-{hi:.0%} fast" in (
        HOST_DRIVEN_OVERLAP_LINE
    )
    partial = groups["partial"]["median_error"]["overlap"]
    eager = groups["eager"]["median_error"]["overlap"]
    assert f"median {partial:.0%} with per-layer graphs and {eager:.0%} without" in (
        HOST_DRIVEN_OVERLAP_LINE
    )
