"""Printing helpers shared by the subcommands: JSON to stdout, rich tables for people, and a
progress bar on stderr for the long searches.

Formats: fractions such as MFU and HFU are percentages in tables and text
(`specs.formats.percent`) and plain fractions (0 to 1) in JSON. Tables fit the terminal by
wrapping cells, never by cutting them; when stdout is not a terminal (a pipe, a file) a table
takes its natural width.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from paraplan.fix_flags import cli_fix
from specs.rules_base import Violation

PIPED_WIDTH = 10_000
"""Console width when stdout is not a terminal: wide enough that no table is cut."""
PROGRESS_DELAY_S = 1.0
"""A progress bar appears once a task has run this long, so that short ones stay quiet."""
PROGRESS_LINE_S = 5.0
"""When stderr is not a terminal (a batch job's log), a plain progress line is written this
often, and at every change of phase."""


def print_json(data: Any) -> None:
    """Machine-readable output: indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def print_verdict(
    label: str, where: str, violations: Sequence[Violation], *, as_json: bool
) -> None:
    """A plan's rule check: with ``as_json`` ``{"valid", "plan", "violations": [{"rule",
    "message"}]}``, else the violations one per line under ``invalid plan (LABEL) for WHERE:``
    (nothing when there are none, the caller goes on). Each message's fix names the command
    line's flags (`paraplan.fix_flags.cli_fix`)."""
    if as_json:
        print_json(
            {
                "valid": not violations,
                "plan": label,
                "violations": [{"rule": v.rule, "message": cli_fix(v.message)} for v in violations],
            }
        )
    elif violations:
        print(f"invalid plan ({label}) for {where}:")
        for v in violations:
            print(f"  [{v.rule}] {cli_fix(v.message)}")


def table_console() -> Console:
    """The console tables print on: the terminal's width, or `PIPED_WIDTH` when piped."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


def build_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A rich table whose cells wrap (overflow ``fold``) instead of being cut; numbers are
    right-aligned."""
    table = Table(title=title)
    for i, col in enumerate(columns):
        numeric = bool(rows) and isinstance(rows[0][i], int | float)
        table.add_column(col, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    return table


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    console: Console | None = None,
) -> None:
    """Print `build_table` on ``console`` (default `table_console`)."""
    (console or table_console()).print(build_table(title, columns, rows))


def _cell(value: Any) -> str:
    """Floats to three significant digits, integers with thousands separators (tokens/s
    ``12,781,730``, GPUs ``16,384``), anything else as `str` writes it."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def human_count(n: float) -> str:
    """1.23B / 45.6M / 7.8K style count."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(int(n))


class DeferredProgress:
    """Progress callback ``(phase, done, total)`` that shows a rich bar on stderr once the
    task has run `PROGRESS_DELAY_S` when stderr is a terminal. Otherwise (a batch job's
    log) it writes a plain line (phase, done of total, seconds elapsed) at each new phase
    after `PROGRESS_DELAY_S` and, from a background thread, every `PROGRESS_LINE_S` with
    the latest state, so that a long phase that reports nothing still shows it is alive.
    ``console`` overrides the stream and the terminal test. Call `close` when the task
    ends."""

    def __init__(
        self,
        console: Console | None = None,
        delay_s: float = PROGRESS_DELAY_S,
        line_s: float = PROGRESS_LINE_S,
    ):
        self.console = console or Console(stderr=True)
        self.delay_s = delay_s
        self.line_s = line_s
        self.start = time.perf_counter()
        self.bar: Progress | None = None
        self.task: Any = None
        self.state: tuple[str, int, int] | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.beat: threading.Thread | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.bar is None:
            if not self.console.is_terminal:
                self._record(phase, done, total)
                return
            if time.perf_counter() - self.start < self.delay_s:
                return
            self.bar = Progress(console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(phase, total=max(total, 1))
        self.bar.update(self.task, description=phase, completed=done, total=max(total, 1))

    def _record(self, phase: str, done: int, total: int) -> None:
        with self.lock:
            new_phase = self.state is None or self.state[0] != phase
            self.state = (phase, done, total)
        if new_phase and time.perf_counter() - self.start >= self.delay_s:
            self._write()
        if self.beat is None:
            self.beat = threading.Thread(target=self._heartbeat, daemon=True)
            self.beat.start()

    def _heartbeat(self) -> None:
        while not self.stop.wait(self.line_s):
            self._write()

    def _write(self) -> None:
        with self.lock:
            if self.state is None or self.stop.is_set():
                return
            phase, done, total = self.state
            elapsed = time.perf_counter() - self.start
            self.console.file.write(
                f"progress: {phase} {done:,} of {total:,}, {elapsed:.0f} s elapsed\n"
            )
            self.console.file.flush()

    def close(self) -> None:
        """Stop the bar (a transient bar leaves no line behind) or the line writer."""
        self.stop.set()
        if self.beat is not None:
            self.beat.join()
            self.beat = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
