"""Printing helpers shared by the subcommands: JSON to stdout, rich tables for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def print_json(data: Any) -> None:
    """Machine-readable output: indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on stdout; numbers are right-aligned."""
    table = Table(title=title)
    for i, col in enumerate(columns):
        numeric = bool(rows) and isinstance(rows[0][i], int | float)
        table.add_column(col, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    Console(width=max(120, Console().width)).print(table)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def human_count(n: float) -> str:
    """1.23B / 45.6M / 7.8K style count."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(int(n))
