"""Cells, rows and tables of the report page (`reports.html`): every string escaped, every
error coloured by its size (within 5% good, within 15% warn, else bad)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any


def pct(error: float | None) -> str:
    return "–" if error is None else f"{error * 100:+.1f}%"


def error_cell(error: float | None) -> str:
    if error is None:
        return "<td>–</td>"
    size = abs(error)
    cls = "good" if size <= 0.05 else "warn" if size <= 0.15 else "bad"
    return f'<td class="{cls}">{pct(error)}</td>'


def td(value: str) -> str:
    return f"<td>{escape(value)}</td>"


def tr(cells: Sequence[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<tr{attr}>" + "".join(cells) + "</tr>"


def table_html(
    headers: Sequence[str], rows: Sequence[str], table_id: str = "", *, text_cols: int = 1
) -> str:
    attr = (f' id="{table_id}"' if table_id else "") + (' class="text2"' if text_cols > 1 else "")
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f'<div class="scroll"><table{attr}><thead><tr>{head}</tr></thead><tbody>' + (
        "".join(rows) + "</tbody></table></div>"
    )


def number(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def optional(value: float | None, fmt: Any) -> str:
    return "–" if value is None else str(fmt(value))
