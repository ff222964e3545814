"""bench/accuracy_table.py: the published-accuracy table's groups (the NVFP4 rows under their
profile generation), its statistics against hand-computed ones and against
`validation_stats.summary`, the command line, and ``validate_published.py --markdown``
writing the table beside the page."""

from __future__ import annotations

import json

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.validation_cases import one_row_csv, synthetic_outcome

table_mod = load_bench("accuracy_table")
stats = load_bench("validation_stats")
report_mod = load_bench("validation_report")
published_csv = load_bench("published_csv")
bench = load_bench("validate_published")


def row(row_id: str, fit_generation: str, kind: str, precision: str, error: float, loso: float):
    """A row of the bench's JSON with only the fields the table reads."""
    return {
        "row_id": row_id,
        "fit_generation": fit_generation,
        "kind": kind,
        "precision": precision,
        "error": error,
        "loso_error": loso,
    }


DENSE_FP8 = [(-0.1, -0.2), (-0.2, -0.3), (0.1, 0.0), (0.3, 0.4), (-0.05, -0.1)]
"""(error, loso_error) of five dense fp8 Blackwell rows."""
DOCUMENT = {
    "loso": {},
    "rows": [
        *(row(str(i), "blackwell", "dense", "fp8", e, lo) for i, (e, lo) in enumerate(DENSE_FP8)),
        row("10", "blackwell/nvfp4", "dense", "nvfp4", 0.123456, -0.2),
        row("11", "blackwell/nvfp4", "dense", "nvfp4", 0.2, -0.3),
        row("12", "blackwell", "moe", "fp8", 0.05, 0.1),
        row("13", "hopper", "dense", "bf16", -0.01, -0.02),
    ],
}


def groups(table: dict) -> dict[tuple, dict]:
    return {(g["generation"], g["kind"], g["precision"]): g for g in table["groups"]}


def test_each_row_joins_three_groups_and_nvfp4_rows_their_profile_generation():
    table = table_mod.accuracy_table(DOCUMENT)
    counts = {key: g["num_rows"] for key, g in groups(table).items()}
    assert counts == {
        ("blackwell", None, None): 8,
        ("blackwell", "dense", None): 7,
        ("blackwell", "dense", "fp8"): 5,
        ("blackwell", "dense", "nvfp4"): 2,
        ("blackwell", "moe", None): 1,
        ("blackwell", "moe", "fp8"): 1,
        ("hopper", None, None): 1,
        ("hopper", "dense", None): 1,
        ("hopper", "dense", "bf16"): 1,
    }
    # the wider group comes before the narrower ones of its generation
    assert list(counts)[:3] == [
        ("blackwell", None, None),
        ("blackwell", "dense", None),
        ("blackwell", "dense", "fp8"),
    ]
    assert table["source"] == {
        "command": "python bench/validate_published.py --json",
        "page": "docs/validation.md",
        "num_rows": 9,
    }


def test_figures_by_hand_out_of_sample_and_in_sample():
    group = groups(table_mod.accuracy_table(DOCUMENT))["blackwell", "dense", "fp8"]
    # |loso| sorted 0, 0.1, 0.2, 0.3, 0.4: p90 at position 3.6 = 0.3 + 0.6 x 0.1
    assert group["loso"] == pytest.approx(
        {"median_abs_error": 0.2, "signed_median_error": -0.1, "p90_abs_error": 0.36}
    )
    # |error| sorted 0.05, 0.1, 0.1, 0.2, 0.3: p90 = 0.2 + 0.6 x 0.1
    assert group["model"] == pytest.approx(
        {"median_abs_error": 0.1, "signed_median_error": -0.05, "p90_abs_error": 0.26}
    )


def test_figures_are_rounded_to_four_decimals():
    group = groups(table_mod.accuracy_table(DOCUMENT))["blackwell", "dense", "nvfp4"]
    # signed median of 0.123456 and 0.2
    assert group["model"]["signed_median_error"] == 0.1617


def test_figures_agree_with_the_summary_of_the_validation_page():
    errors = [(3.0, 2.5), (2.0, 2.3), (1.0, 0.7), (4.0, 4.1), (5.0, 6.2), (2.0, 1.9)]
    outcomes = [
        synthetic_outcome(str(i), "SRC", published, predicted)
        for i, (published, predicted) in enumerate(errors)
    ]
    document = {
        "loso": {},
        "rows": [
            report_mod.outcome_row(o, o.error) | {"fit_generation": "hopper"} for o in outcomes
        ],
    }
    group = groups(table_mod.accuracy_table(document))["hopper", None, None]
    expected = stats.summary(outcomes)
    assert group["num_rows"] == expected["num_rows"] == 6
    for name in ("median_abs_error", "signed_median_error", "p90_abs_error"):
        assert group["model"][name] == round(expected[name], 4)


def test_a_document_without_the_out_of_sample_fits_is_refused(tmp_path, capsys):
    no_fit = {"rows": DOCUMENT["rows"]}
    with pytest.raises(ValueError, match="no leave-one-source-out section"):
        table_mod.accuracy_table(no_fit)
    path = tmp_path / "no_fit.json"
    path.write_text(json.dumps(no_fit))
    out = tmp_path / "table.json"
    assert table_mod.main(["--from-json", str(path), "--out", str(out)]) == 2
    assert not out.exists() and "--no-fit" in capsys.readouterr().err


@pytest.mark.parametrize("text", [None, "{not json"])
def test_an_unreadable_input_is_named_without_a_traceback(tmp_path, capsys, text):
    path = tmp_path / "full.json"
    if text is not None:
        path.write_text(text)
    out = tmp_path / "table.json"
    assert table_mod.main(["--from-json", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: cannot read the bench's JSON" in err and "Traceback" not in err
    assert not out.exists()


def test_the_command_line_writes_what_the_function_returns(tmp_path, capsys):
    path = tmp_path / "full.json"
    path.write_text(json.dumps(DOCUMENT))
    out = tmp_path / "data" / "table.json"
    assert table_mod.main(["--from-json", str(path), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == table_mod.accuracy_table(DOCUMENT)
    assert "9 groups over 9 rows" in capsys.readouterr().out


def test_markdown_outputs_write_the_page_and_the_table_from_one_result(tmp_path, monkeypatch):
    pages = []
    # the page itself needs a full result; what is checked here is the table beside it
    monkeypatch.setattr(bench, "write_markdown", lambda result, path: pages.append((result, path)))
    table = tmp_path / "published_accuracy.json"
    bench.write_markdown_outputs(DOCUMENT, tmp_path, table)
    assert pages == [(DOCUMENT, tmp_path / "validation.md")]
    assert json.loads(table.read_text()) == table_mod.accuracy_table(DOCUMENT)


def test_the_markdown_flag_writes_through_markdown_outputs(tmp_path, monkeypatch, capsys):
    one = one_row_csv(tmp_path, "1")
    written = []
    monkeypatch.setattr(bench, "write_markdown_outputs", written.append)
    assert bench.main(["--no-fit", "--markdown", "--csv", str(one)]) == 0
    capsys.readouterr()
    (result,) = written
    assert [r["row_id"] for r in result["rows"]] == ["1"]
