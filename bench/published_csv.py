"""The published-runs development set (``published-runs-dev.csv``, column guide
``published-runs-dev.md`` beside it) as the benches read it: where the CSV is, its rows as
dicts of column -> text, and the rows named by id or matched by ``--rows`` texts."""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from row_spellings import normalised_row

CSV_NAME = "shared/reference/published-runs-dev.csv"


def default_csv() -> Path | None:
    """``shared/reference/published-runs-dev.csv`` in the nearest folder above this file."""
    for parent in Path(__file__).resolve().parents:
        if (parent / CSV_NAME).is_file():
            return parent / CSV_NAME
    return None


REQUIRED_COLUMNS = (
    "row_id",
    "model",
    "gpu_type",
    "precision",
    "num_layers",
    "pp",
    "seq_length",
    "global_batch_size",
    "iteration_time_s",
)
"""Columns every row is read by, besides its source and trust (`header_problem`); the others
may be absent: an absent column is an empty cell."""

TRUST_LEVELS = ("A", "B", "C")
"""The ``trust`` levels of the column guide (``published-runs-dev.md``)."""


def header_problem(path: Path, trust: str | None = None) -> str | None:
    """A line naming what the CSV at ``path`` lacks, or None: a `REQUIRED_COLUMNS` column;
    ``source_id`` where ``source`` is absent too (`derived_source_id` reads it); ``trust``
    where no ``trust`` level is given for every row (``--trust``), and a level given where
    the CSV has the column."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        header = [name.strip() for name in next(csv.reader(handle), [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if "source_id" not in header and "source" not in header:
        missing.append("source_id (or source, to derive it from)")
    if missing:
        return (
            f"{path} lacks the columns {', '.join(missing)} (column guide: published-runs-dev.md)"
        )
    if "trust" in header and trust is not None:
        return f"{path} has a trust column: --trust gives a level only to a CSV without one"
    if "trust" not in header and trust is None:
        return (
            f"{path} has no trust column: pass --trust A, B or C to give every row that level "
            "(A and B rows enter the figures, C rows are priced apart; published-runs-dev.md)"
        )
    return None


def derived_source_id(source: str) -> str:
    """A source id for a row whose CSV has only the ``source`` text: the first word in
    capitals, the first year after it and the table, ``Narayanan et al. 2021, '...',
    Table 1`` -> ``NARAYANAN2021-T1``. The part before the dash is the source family
    (`validation_stats.ValidationRow.source_family`), so every table of one publication is
    left out together."""
    word = re.search(r"[A-Za-z]+", source)
    year = re.search(r"\b(19|20)\d{2}\b", source)
    table = re.search(r"\bTable\s+(\w+)", source)
    family = (word.group(0).upper() if word else "SOURCE") + (year.group(0) if year else "")
    return f"{family}-T{table.group(1)}" if table else family


def read_rows(path: Path, trust: str | None = None) -> list[dict[str, str]]:
    """The CSV's rows as dicts of column -> text, each cell in its accepted spelling
    (`row_spellings.normalised_row`; a byte-order mark and CRLF line ends are read as
    plain text). A CSV without a ``source_id`` column gets `derived_source_id` of each
    row's ``source``; one without a ``trust`` column gets ``trust`` (one of `TRUST_LEVELS`)
    on every row."""
    if trust is not None and trust not in TRUST_LEVELS:
        raise ValueError(f"trust must be one of {', '.join(TRUST_LEVELS)}, got {trust!r}")
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = [normalised_row(raw) for raw in csv.DictReader(handle)]
    for raw in rows:
        if "source_id" not in raw:
            raw["source_id"] = derived_source_id(raw.get("source") or "")
        if "trust" not in raw and trust is not None:
            raw["trust"] = trust
    return rows


def rows_by_ids(ids_text: str) -> tuple[list[dict[str, str]], str | None]:
    """The dev set's rows named in ``ids_text`` (comma-separated row ids), in that order, or
    an error line naming the missing CSV or the ids it lacks."""
    path = default_csv()
    if path is None:
        return [], f"{CSV_NAME} not found above {Path(__file__).parent}"
    wanted = [r.strip() for r in ids_text.split(",") if r.strip()]
    by_id = {raw["row_id"]: raw for raw in read_rows(path)}
    missing = [r for r in wanted if r not in by_id]
    if missing:
        return [], f"rows not in {path}: {', '.join(missing)}"
    return [by_id[r] for r in wanted], None


def rows_main(
    description: str,
    lines: Callable[[list[dict[str, str]]], Iterable[str]],
    argv: list[str] | None = None,
    default_rows: str | None = None,
) -> int:
    """Entry point of a bench script that prints ``lines(rows)``, one per line, for the
    dev-set rows named by ``--rows`` (comma-separated ids; required unless ``default_rows``
    is given): 0, or 1 with `rows_by_ids`' error line on stderr."""
    parser = argparse.ArgumentParser(description=description)
    if default_rows is None:
        parser.add_argument("--rows", required=True, help="comma-separated row ids")
    else:
        parser.add_argument("--rows", default=default_rows, help="comma-separated row ids")
    args = parser.parse_args(argv)
    rows, error = rows_by_ids(args.rows)
    if error is not None:
        print(error, file=sys.stderr)
        return 1
    for line in lines(rows):
        print(line)
    return 0


def row_report_main(
    description: str,
    report: Callable[[dict[str, str]], str],
    argv: list[str] | None = None,
    default_rows: str | None = None,
) -> int:
    """`rows_main` of a script that prints ``report(row)`` for each row, in ``--rows``
    order."""
    return rows_main(description, lambda rows: map(report, rows), argv, default_rows)


def milliseconds(seconds: float) -> str:
    """``seconds`` as milliseconds, right-aligned in 9 characters with 3 decimals."""
    return f"{seconds * 1e3:9.3f}"


def select_rows(rows: list[dict[str, str]], texts: str) -> list[dict[str, str]]:
    """The ``rows`` whose ``row_id``, ``source_id`` or ``model`` contains one of the
    comma-separated ``texts`` (case-insensitive); every row when ``texts`` is empty."""
    wanted = [t.strip().lower() for t in texts.split(",") if t.strip()]
    if not wanted:
        return rows
    return [
        raw
        for raw in rows
        if any(
            w == raw["row_id"] or w in raw["source_id"].lower() or w in raw["model"].lower()
            for w in wanted
        )
    ]
