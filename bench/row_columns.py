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
    """An integer column; empty or ``n/a`` gives ``default`` (NotExpressible when None)."""
    text = column_text(raw, key)
    if text in ("", "n/a"):
        if default is None:
            raise NotExpressible(f"{key} not stated")
        return default
    if not re.fullmatch(r"\d+", text):
        raise NotExpressible(f"{key} = {text!r} is not a number")
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
        raise NotExpressible(f"{key} = {text!r} is not a number") from None
    if not value > 0:
        raise NotExpressible(f"{key} = {text!r} is not a positive number")
    return value
