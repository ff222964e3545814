"""bench/published_csv.py: the entry point of the per-row bench scripts (`rows_main`,
`row_report_main`) on rows of ``published-runs-dev.csv``."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

published_csv = load_bench("published_csv")


@pytest.fixture(autouse=True)
def _dev_set() -> None:
    if published_csv.default_csv() is None:
        pytest.skip("published-runs-dev.csv not found")


def test_rows_main_prints_each_line_of_the_named_rows_in_their_order(capsys):
    def lines(rows: list[dict[str, str]]) -> list[str]:
        return [f"{len(rows)} rows", *(r["row_id"] for r in rows)]

    assert published_csv.rows_main("d", lines, ["--rows", "39, 38"]) == 0
    assert capsys.readouterr().out == "2 rows\n39\n38\n"


def test_rows_main_takes_the_default_rows_and_refuses_unknown_ids(capsys):
    def ids(rows: list[dict[str, str]]) -> list[str]:
        return [r["row_id"] for r in rows]

    assert published_csv.rows_main("d", ids, [], default_rows="40") == 0
    assert capsys.readouterr().out == "40\n"
    assert published_csv.rows_main("d", ids, ["--rows", "38,no-such-row"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "no-such-row" in captured.err


def test_row_report_main_prints_one_report_per_row(capsys):
    assert published_csv.row_report_main("d", lambda r: r["model"], ["--rows", "38,38"]) == 0
    model = published_csv.rows_by_ids("38")[0][0]["model"]
    assert capsys.readouterr().out == f"{model}\n{model}\n"
