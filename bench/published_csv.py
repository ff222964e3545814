"""The published-runs development set (``published-runs-dev.csv``, column guide
``published-runs-dev.md`` beside it) as the benches read it: where the CSV is, its rows as
dicts of column -> text, and the rows named by id or matched by ``--rows`` texts."""

from __future__ import annotations

import csv
from pathlib import Path

CSV_NAME = "shared/reference/published-runs-dev.csv"


def default_csv() -> Path | None:
    """``shared/reference/published-runs-dev.csv`` in the nearest folder above this file."""
    for parent in Path(__file__).resolve().parents:
        if (parent / CSV_NAME).is_file():
            return parent / CSV_NAME
    return None


REQUIRED_COLUMNS = (
    "row_id",
    "source_id",
    "trust",
    "model",
    "gpu_type",
    "precision",
    "num_layers",
    "pp",
    "seq_length",
    "global_batch_size",
    "iteration_time_s",
)
"""Columns every row is read by (the others may be absent: an absent column is an empty
cell)."""


def header_problem(path: Path) -> str | None:
    """A line naming the `REQUIRED_COLUMNS` the CSV at ``path`` lacks, or None."""
    with path.open(newline="") as handle:
        header = next(csv.reader(handle), [])
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if not missing:
        return None
    return f"{path} lacks the columns {', '.join(missing)} (column guide: published-runs-dev.md)"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows as dicts of column -> text."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


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
