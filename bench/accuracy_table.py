"""Build the published-accuracy table: the validation's errors grouped by generation, kind.

The table `paraplan estimate` and `paraplan plan` print from (`paraplan/accuracy.py`,
shipped as ``paraplan/data/published_accuracy.json``) holds the errors of the published-runs
validation (`bench/validate_published.py`, docs/validation.md) grouped by what a user's job
shares with the runs.

Each row of the bench's JSON (``rows``) joins three groups, from the narrowest: (profile
generation, dense/moe, precision), (profile generation, dense/moe) and (profile generation).
The profile generation is the row's ``fit_generation`` (`profiles.schema_device.DeviceSpec.
generation`: ``ampere``, ``hopper``, ``blackwell``, ``blackwell_ultra``) without the NVFP4
suffix (`validation_stats.FP4_SUFFIX`; the row's precision already says ``nvfp4``). Per group:
the number of rows and, for the leave-one-source-out error (``loso_error``, each row
predicted by the figures fitted without its source family: out of sample) and the shipped
model's error (``error``, its own family in the fit: in sample), the median |error|, the
signed median and the p90 |error| (`validation_stats.error_figures`, the statistics of
docs/validation.md's summary table). Errors are relative: (predicted - published) /
published seconds per iteration; negative is predicted faster than published.

The table carries its provenance (``source``: the command whose JSON it was built from, the
page that shows the same rows, the number of rows) and rounds every figure to `DECIMALS`.

Usage: ``python bench/accuracy_table.py --from-json FILE [--out PATH]``, FILE being the
output of ``python bench/validate_published.py --json``; ``validate_published.py
--markdown`` writes the table too (`write_table`), so the page and the table stay in step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from validation_stats import FP4_SUFFIX, error_figures

from paraplan.accuracy import PAGE, TABLE_PATH

INPUT_COMMAND = "python bench/validate_published.py --json"
"""The command whose JSON document the table is built from."""
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "paraplan" / TABLE_PATH
"""Where the command line writes the table: the copy `paraplan/accuracy.py` reads."""
DECIMALS = 4
"""Decimals of every relative error in the table (0.0001: a hundredth of a percent)."""
FIGURES = {"loso": "loso_error", "model": "error"}
"""Table key -> the row field its figures summarize: out of sample first, then in sample."""

GroupKey = tuple[str, str | None, str | None]
"""(profile generation, dense/moe or None, precision or None): None widens the group to
every value of the field."""


def profile_generation(row: dict) -> str:
    """The profile generation of a row of the bench's JSON: its ``fit_generation`` without
    the NVFP4 suffix (``blackwell/nvfp4`` -> ``blackwell``)."""
    return row["fit_generation"].removesuffix(FP4_SUFFIX)


def group_keys(row: dict) -> list[GroupKey]:
    """The three groups a row belongs to, narrowest first."""
    generation = profile_generation(row)
    return [
        (generation, row["kind"], row["precision"]),
        (generation, row["kind"], None),
        (generation, None, None),
    ]


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    """``figures`` rounded to `DECIMALS`."""
    return {name: round(value, DECIMALS) for name, value in figures.items()}


def accuracy_table(document: dict) -> dict:
    """The published-accuracy table of ``document`` (the JSON of `INPUT_COMMAND`, whose
    ``rows`` carry ``fit_generation``, ``kind``, ``precision``, ``error`` and
    ``loso_error``): ``source`` (command, page, number of rows) and ``groups``, a list of
    {generation, kind, precision, num_rows, loso, model} sorted by generation with the wider
    group before the narrower ones; ``loso`` and ``model`` hold ``median_abs_error``,
    ``signed_median_error`` and ``p90_abs_error``. Raises ValueError on a document without
    rows or without the leave-one-source-out section ``loso``: a ``--no-fit`` run copies each
    row's in-sample error into ``loso_error`` and has no out-of-sample figure to give."""
    rows = document.get("rows", [])
    if not rows:
        raise ValueError(f"the document has no rows; the table needs the output of {INPUT_COMMAND}")
    if "loso" not in document:
        raise ValueError(
            "the document has no leave-one-source-out section (loso): the table needs the "
            f"fits of {INPUT_COMMAND}, run without --no-fit"
        )
    members: dict[GroupKey, list[dict]] = {}
    for row in rows:
        for key in group_keys(row):
            members.setdefault(key, []).append(row)
    groups = [
        {
            "generation": generation,
            "kind": kind,
            "precision": precision,
            "num_rows": len(grouped),
            **{
                name: _rounded(error_figures([r[field] for r in grouped]))
                for name, field in FIGURES.items()
            },
        }
        for (generation, kind, precision), grouped in sorted(
            members.items(), key=lambda item: tuple(part or "" for part in item[0])
        )
    ]
    return {
        "source": {
            "command": INPUT_COMMAND,
            "page": PAGE,
            "num_rows": len(rows),
        },
        "groups": groups,
    }


def write_table(document: dict, path: Path) -> dict:
    """Write `accuracy_table` of ``document`` to ``path`` as JSON (indent 1, a final newline)
    and return it."""
    table = accuracy_table(document)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from-json", type=Path, required=True, help=f"the output of {INPUT_COMMAND}"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where to write the table ({DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.from_json.read_text())
    except (OSError, json.JSONDecodeError) as error:
        print(f"{args.from_json}: cannot read the bench's JSON: {error}", file=sys.stderr)
        return 2
    try:
        table = write_table(document, args.out)
    except (ValueError, OSError) as error:
        print(error, file=sys.stderr)
        return 2
    print(f"{args.out}: {len(table['groups'])} groups over {table['source']['num_rows']} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
