"""Readers of one column of a ``published-runs-dev.csv`` row (column guide:
``published-runs-dev.md``).

A row is a ``dict[str, str]`` as `csv.DictReader` yields it. Every reader strips the text;
an empty cell is absent. `column_int` raises `NotExpressible` for a required integer the row
leaves empty or states as text, so a row that cannot be priced names the column.
"""

from __future__ import annotations

import re

from recipe_keys import NotExpressible


def column_text(raw: dict[str, str], key: str) -> str:
    """The stripped text of column ``key``; empty when the row has none."""
    return (raw.get(key) or "").strip()


def column_int(raw: dict[str, str], key: str, default: int | None = None) -> int:
    """An integer column; empty or ``n/a`` gives ``default`` (NotExpressible when None).
    NotExpressible for a text that is not digits, and for 0 unless ``default`` is 0 (a count
    whose absence means none, e.g. ``num_experts``)."""
    text = column_text(raw, key)
    if text in ("", "n/a"):
        if default is None:
            raise NotExpressible(f"{key} not stated")
        return default
    if not re.fullmatch(r"\d+", text):
        raise NotExpressible(
            f"{key} = {text!r} is not a number: state it in digits "
            "(`row_spellings.count_text` reads separators, unit words and seq_length's K)"
        )
    if int(text) == 0 and default != 0:
        raise NotExpressible(f"{key} = {text!r}: state a positive integer")
    return int(text)


def column_float(raw: dict[str, str], key: str) -> float | None:
    """A positive number column (a published figure); None when empty or ``n/a``,
    NotExpressible when the text is not a positive number, so a figure is never skipped
    for the next column in silence."""
    text = column_text(raw, key)
    if text in ("", "n/a"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise NotExpressible(
            f"{key} = {text!r} is not a number: state it in digits "
            "(`row_spellings.figure_text` reads separators and units)"
        ) from None
    if not value > 0:
        raise NotExpressible(f"{key} = {text!r} is not a positive number")
    return value
