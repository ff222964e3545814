"""The fidelity benchmark's result (`bench/fidelity.py`'s ``WORK/fidelity.json``) as rich
tables on the terminal and as markdown for `docs/fidelity.md`: one table per section (the timing
plans, the same with the calibrated profile, the world-4 coverage plans), each followed by
its summary (`reports.fidelity.summary_text`) and the planner's pick."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from reports.fidelity import COLUMNS, row_cells, summary_text


def sections(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Title -> section (summary keys, ``rows``) of a bench result."""
    found = {"timing (world 1-2)": result}
    if "calibrated" in result:
        found["timing, calibrated profile"] = result["calibrated"]
        speed = result["calibrated"].get("host_speed")
        if speed is not None:
            slope = f", elasticity {speed['elasticity']:.2f}" if "elasticity" in speed else ""
            found[f"timing, calibrated profile at each run's host speed{slope}"] = speed
    if "coverage" in result:
        found["coverage (world 4 on 2 cores)"] = result["coverage"]
    return found


def pick_line(section: dict[str, Any]) -> str:
    pick = section.get("pick")
    if pick is None:
        return ""
    if pick["row"] is None:
        return f"planner pick: none ({pick['error']})"
    return (
        f"planner pick: {pick['plan']} ({pick['measured_s'] * 1e3:.1f} ms measured); fastest "
        f"measured: {pick['best_measured']} ({pick['best_measured_s'] * 1e3:.1f} ms)"
        + (f", both at the {pick['measured_at']}" if "measured_at" in pick else "")
    )


def machine_text(result: dict[str, Any]) -> str:
    """The machine and its 1-minute load average at the start and the end."""
    load = result["load_average"]
    return (
        f"Machine: {result['machine']}; load average {load['start'][0]:.1f} at the start, "
        f"{load['end'][0]:.1f} at the end" + set_aside_text(result.get("set_aside", []))
    )


def set_aside_text(set_aside: list[dict[str, Any]]) -> str:
    """The runs and profile draws a bench set aside and took again because the hypervisor
    took too much of the machine's CPU during them (`bench/fidelity_rounds.measure_rounds`,
    `bench/fidelity_profiles.ProfileDraws`), or nothing."""
    if not set_aside:
        return ""
    runs = ", ".join(f"{r['name']} ({r['steal']:.1%} stolen)" for r in set_aside)
    return f"; {len(set_aside)} run(s) set aside for steal time and run again: {runs}"


def print_tables(result: dict[str, Any]) -> None:
    """A rich table per section on stdout, each followed by its summary and pick."""
    console = Console(width=160)
    for title, section in sections(result).items():
        table = Table(title=title)
        for i, col in enumerate(COLUMNS):
            table.add_column(col, justify="left" if i < 2 else "right")
        for row in section["rows"]:
            table.add_row(*row_cells(row))
        console.print(table)
        console.print(summary_text(section))
        if pick_line(section):
            console.print(pick_line(section))
    console.print(machine_text(result))


def markdown(result: dict[str, Any]) -> str:
    """Every section as a markdown table with its summary (for `docs/fidelity.md`)."""
    lines = []
    for title, section in sections(result).items():
        lines += [f"**{title}**", "", "| " + " | ".join(COLUMNS) + " |"]
        lines.append("|" + "---|" * len(COLUMNS))
        lines += ["| " + " | ".join(row_cells(r)) + " |" for r in section["rows"]]
        lines += ["", summary_text(section), ""]
        lines += [pick_line(section), ""] if pick_line(section) else []
    lines.append(machine_text(result) + ".")
    return "\n".join(lines)
