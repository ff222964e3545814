"""Printing helpers: tables wrap instead of cutting cells, and the progress bar shows only on
a terminal and only after its delay."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from paraplan.output import DeferredProgress, build_table, table_console
from specs.formats import percent

COLUMNS = ["tp", "recompute", "tokens/s", "MFU", "peak GiB"]
ROWS = [[8, "full:uniform", 1527305, percent(0.677), 61.2]]


def test_narrow_terminal_wraps_and_never_cuts() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=40, force_terminal=True, color_system=None)
    console.print(build_table("t", COLUMNS, ROWS))
    lines = re.sub(r"\x1b\[[0-9;]*m", "", buffer.getvalue()).splitlines()
    assert max(len(line) for line in lines) <= 40
    assert not any("…" in line for line in lines)
    # every cell is printed whole, folded over lines: read the columns back top to bottom
    body = [line for line in lines if line.startswith("│")]
    columns = zip(*(b.split("│")[1:-1] for b in body), strict=True)
    cells = ["".join(parts).replace(" ", "") for parts in columns]
    assert cells == ["8", "full:uniform", "1,527,305", "67.7%", "61.2"]


def test_piped_table_takes_its_natural_width(capsys) -> None:
    console = table_console()  # stdout is captured: not a terminal
    assert not console.is_terminal or console.width >= 120
    console.print(build_table("t", COLUMNS, ROWS))
    out = capsys.readouterr().out
    assert "tokens/s" in out and "full:uniform" in out and "1,527,305" in out and "…" not in out


def test_progress_shows_on_a_terminal_after_the_delay() -> None:
    buffer = io.StringIO()
    bar = DeferredProgress(Console(file=buffer, force_terminal=True, width=80), delay_s=0.0)
    bar("searching 1024 GPUs", 1, 4)
    assert bar.bar is not None
    bar.close()
    assert "searching 1024 GPUs" in buffer.getvalue()
    quiet = DeferredProgress(Console(file=io.StringIO(), force_terminal=True), delay_s=3600.0)
    quiet("screen", 0, 10)
    assert quiet.bar is None
    piped = DeferredProgress(Console(file=io.StringIO(), force_terminal=False), delay_s=0.0)
    piped("screen", 0, 10)
    assert piped.bar is None


def test_progress_writes_lines_when_stderr_is_not_a_terminal() -> None:
    """A batch job's log gets a line per phase, and a line per interval within a phase
    that reports nothing (the heartbeat), none after `close`."""
    log = io.StringIO()
    lines = DeferredProgress(Console(file=log, force_terminal=False), delay_s=0.0, line_s=3600)
    lines("check", 0, 280)
    lines("check", 100, 280)  # same phase, within the interval: no line
    lines("simulate", 2, 12_000)
    lines.close()
    assert lines.bar is None
    written = log.getvalue().splitlines()
    assert len(written) == 2
    assert written[0].startswith("progress: check 0 of 280, ")
    assert written[1].startswith("progress: simulate 2 of 12,000, ")
    assert written[1].endswith(" s elapsed")
    beat_log = io.StringIO()
    beat = DeferredProgress(Console(file=beat_log, force_terminal=False), delay_s=0.0, line_s=0.01)
    beat("screen", 0, 29_919)
    time.sleep(0.2)
    beat.close()
    count = beat_log.getvalue().count("progress: screen 0 of 29,919")
    assert count >= 3
    time.sleep(0.05)
    assert beat_log.getvalue().count("progress: screen") == count
