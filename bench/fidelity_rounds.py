"""The fidelity benchmark's rounds (`bench/fidelity.py`): every plan run its repeats, one
run of each plan per round, failed runs retried and runs the hypervisor stole CPU time
from set aside and run again; and the suite's rows from those runs.

bench/ is not a package: `bench/fidelity.py` imports this file as a sibling script does.
One run goes through `fidelity_suite.measure`, looked up at the call (tests replace it).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fidelity_suite
from fidelity_suite import (
    MAX_FAILED_RUNS,
    MAX_SET_ASIDE,
    Case,
    Profiles,
    Run,
    Settings,
    bundle_of,
    case_row,
    drop_traces,
    knob_label,
    paths_of,
    profile_for,
    run_folder,
)
from rich.console import Console
from rich.markup import escape

from executor.launch import LaunchError
from reports.fidelity import FidelityRow
from specs.errors import SpecError


def measure_rounds(
    cases: tuple[Case, ...],
    paths: Mapping[int, str],
    settings: Settings,
    log: Console,
    failures: list[dict[str, str]],
    before_round: Callable[[int], None] | None = None,
    set_aside: list[dict[str, Any]] | None = None,
) -> dict[str, list[Run]]:
    """Every case's `Run`s, ``settings.repeats`` of each, one run of each case per round: a
    spell of the host lands on different cases in different rounds. ``paths`` names each
    world size's profile in the plans (`Profiles` paths); ``before_round(k)`` runs before
    round k (0-based) starts. Every failed run is listed in ``failures``; a case runs again
    in a further round until it has failed `MAX_FAILED_RUNS` times (a gloo connection on a
    loaded host may reset once), and a case without a single good run is left out of the
    result. A `Run.disturbed` run is moved to ``<folder>.stolen<k>``, listed in
    ``set_aside`` and run again in a further round, up to `MAX_SET_ASIDE` times a case."""
    state = _Rounds(paths=paths, settings=settings, log=log, failures=failures, set_aside=set_aside)
    state.runs = {c.name: [] for c in cases}
    for k in range(settings.repeats + MAX_FAILED_RUNS + MAX_SET_ASIDE):
        pending = [c for c in cases if state.pending(c)]
        if pending and before_round is not None:
            before_round(k)
        for i, case in enumerate(pending, 1):
            where = f"round {k + 1}, {i}/{len(pending)}: {case.name} ({knob_label(case.plan)})"
            state.attempt(case, k + 1, where)
    return {name: done for name, done in state.runs.items() if done}


@dataclass(kw_only=True)
class _Rounds:
    """What `measure_rounds` keeps between runs."""

    paths: Mapping[int, str]
    settings: Settings
    log: Console
    failures: list[dict[str, str]]
    set_aside: list[dict[str, Any]] | None = None
    runs: dict[str, list[Run]] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    stolen: dict[str, int] = field(default_factory=dict)

    def pending(self, case: Case) -> bool:
        """Whether ``case`` needs another run and may still have one."""
        done = len(self.runs[case.name]) >= self.settings.repeats
        return not done and self.failed.get(case.name, 0) < MAX_FAILED_RUNS

    def attempt(self, case: Case, round_: int, where: str) -> None:
        """Run ``case`` once: keep the run, list its failure, or set it aside for steal."""
        start = time.perf_counter()
        name, settings = case.name, self.settings
        folder = run_folder(settings, case, len(self.runs[name]))
        bundle = bundle_of(case, profile_for(self.paths, case), settings.precision)
        try:
            run = fidelity_suite.measure(bundle, folder, settings)
        except (LaunchError, SpecError) as exc:
            self.failed[name] = self.failed.get(name, 0) + 1
            self.failures.append(
                {"name": name, "plan": case.plan.label(), "round": str(round_), "error": str(exc)}
            )
            self.log.print(f"  {where}: FAILED {escape(str(exc)[:300])}")
            return
        wall_s, load = time.perf_counter() - start, os.getloadavg()[0]
        took = f"{run.seconds:.4f} s  [dim]({wall_s:.0f} s, load {load:.1f})"
        if run.disturbed and self.stolen.get(name, 0) < MAX_SET_ASIDE:
            self.stolen[name] = self.stolen.get(name, 0) + 1
            aside = set_run_aside(folder, self.stolen[name])
            if self.set_aside is not None:
                self.set_aside.append(
                    {"name": name, "round": round_, "seconds": run.seconds, "steal": run.steal,
                     "folder": str(aside)}
                )  # fmt: skip
            self.log.print(f"  {where}: set aside ({run.steal:.2%} of the CPU stolen), {took}")
            return
        self.runs[name].append(run)
        if len(self.runs[name]) > 1:
            drop_traces(folder)
        stolen = f", {run.steal:.2%} of the CPU stolen" if run.disturbed else ""
        self.log.print(f"  {where}: measured {took}{stolen}")


def set_run_aside(folder: Path, k: int) -> Path:
    """Move a disturbed run's folder to ``<folder>.stolen<k>`` (its traces dropped), out
    of the way of the plan's next run."""
    aside = folder.with_name(f"{folder.name}.stolen{k}")
    shutil.rmtree(aside, ignore_errors=True)
    drop_traces(folder)
    folder.rename(aside)
    return aside


def run_case(
    case: Case,
    profiles: Profiles,
    settings: Settings,
    log: Console,
    failures: list[dict[str, str]],
    measured: dict[str, list[Run]],
    note: str = "",
    set_aside: list[dict[str, Any]] | None = None,
) -> FidelityRow:
    """Execute (`Settings.repeats` runs) and predict one case; its run folder is
    ``WORK/runs/<name>``, its runs join ``measured``. Failed runs are listed in
    ``failures``, stolen ones in ``set_aside`` (`measure_rounds`); raises `SpecError` when
    none succeeded."""
    runs = measure_rounds((case,), paths_of(profiles), settings, log, failures, set_aside=set_aside)
    if case.name not in runs:
        raise SpecError(f"executing {case.name} ({case.plan.label()}) failed: {failures[-1]}")
    measured.update(runs)
    return case_row(case, profiles, settings, runs[case.name], note)


def run_suite(
    cases: tuple[Case, ...],
    profiles: Profiles,
    settings: Settings,
    log: Console,
    failures: list[dict[str, str]],
    set_aside: list[dict[str, Any]] | None = None,
) -> list[FidelityRow]:
    """Every case that runs (`measure_rounds`), as rows; a failed run is listed in
    ``failures``, a stolen one in ``set_aside``."""
    runs = measure_rounds(cases, paths_of(profiles), settings, log, failures, set_aside=set_aside)
    return [
        case_row(case, profiles, settings, runs[case.name]) for case in cases if case.name in runs
    ]
