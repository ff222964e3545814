"""The fidelity benchmark's calibrated section (`bench/fidelity.py --calibrate`): a profile
fitted by `paraplan calibrate` on the calibration runs, every row predicted again with it,
and the host-speed view of those rows (`reports.fidelity.at_host_speed`).

bench/ is not a package: `bench/fidelity.py` imports this file as a sibling script does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fidelity_suite import (
    CALIBRATION_CASES,
    PICK_CASE,
    Case,
    Profiles,
    Run,
    Settings,
    add_pick,
    bundle_of,
    pick_details,
    planner_choice,
    predict,
    profile_for,
    run_folder,
    section,
    typical,
)
from rich.console import Console
from rich.markup import escape

from paraplan.commands.demo import run_command
from profiles.lookup import host_probe_s
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from reports.calibrate import time_scaled
from reports.fidelity import FidelityRow, at_host_speed, median_run
from specs.errors import SpecError


def calibrate_profile(
    profile_path: Path,
    runs: dict[str, list[Run]],
    settings: Settings,
    log: Console,
) -> Path:
    """Fit ``WORK/profile-calibrated.json`` with `paraplan calibrate` on the middle run
    (`typical`) of each of `CALIBRATION_CASES` (``runs``: measured in the suite's rounds,
    `run_bench`)."""
    try:
        command = importlib.import_module("paraplan.commands.calibrate")
    except ModuleNotFoundError as exc:
        raise SpecError(
            "--calibrate needs `paraplan calibrate` (paraplan/commands/calibrate.py), which "
            "this checkout lacks; run the bench without --calibrate"
        ) from exc
    base = load_profile(str(profile_path))
    missing = [c.name for c in CALIBRATION_CASES if c.name not in runs]
    if missing:
        raise SpecError(f"calibration runs failed ({', '.join(missing)}); see the failures")
    folders = []
    for case in CALIBRATION_CASES:
        medians = [r.seconds for r in runs[case.name]]
        middle = median_run(medians)
        out = run_folder(settings, case, middle)
        predict(bundle_of(case, str(profile_path), settings.precision), base, out)
        log.print(
            f"  calibration run {case.name} ({case.plan.label()}): {medians[middle]:.4f} s "
            f"(middle of {len(medians)})"
        )
        folders.append(str(out))
    path = settings.work / "profile-calibrated.json"
    # the command's printout (fitted factors, errors before and after) is progress here
    with contextlib.redirect_stdout(sys.stderr):
        code = run_command(command, [*folders, "-o", str(path), "--hardware", str(profile_path)])
    if code != 0:
        raise SpecError(f"paraplan calibrate {' '.join(folders)} -o {path} failed (exit {code})")
    return path


def repredicted(
    rows: list[FidelityRow], cases: list[Case], profiles: Profiles, settings: Settings
) -> list[FidelityRow]:
    """``rows`` with the predictions of ``profiles`` instead."""
    by_name = {c.name: c for c in cases}
    out = []
    for row in rows:
        case = by_name[row.name]
        hardware, profile = profile_for(profiles, case)
        seconds, gib, why = predict(bundle_of(case, hardware, settings.precision), profile)
        out.append(
            dataclasses.replace(
                row, predicted_time_s=seconds, predicted_memory_gib=gib, note=why or row.note
            )
        )
    return out


def calibrated_section(
    profiles: Profiles,
    cases: list[Case],
    rows: list[FidelityRow],
    settings: Settings,
    log: Console,
    run: Callable[[Case], FidelityRow],
    calibration_runs: dict[str, list[Run]],
) -> dict[str, Any]:
    """Fit a profile on the calibration runs (2 ranks); the figures of every row predicted
    with it (the calibrated profile's own pick is executed when it is a new plan). The
    profiles of other world sizes take the same time scale (`calibrated_profiles`)."""
    log.print("calibration (runs outside the suite):")
    path = calibrate_profile(Path(profiles[2][0]), calibration_runs, settings, log)
    calibrated = calibrated_profiles(profiles, load_profile(str(path)), str(path))
    profile = calibrated[2][1]
    main_case = next(c for c in cases if c.name == PICK_CASE)
    plan, why = planner_choice(main_case, profile, str(path), settings.precision)
    if plan is None:
        log.print(f"  calibrated planner pick: none ({escape(why)})")
    pick = add_pick(plan, "calibrated-pick", cases, rows, run) if plan else None
    cal_rows = repredicted(rows, cases, calibrated, settings)
    result = section(cal_rows, pick) | {
        "profile": str(path),
        "pick": pick_details(cal_rows, pick, why),
    }
    references = probe_references(profiles, calibration_probe_s(calibration_runs))
    if references is None or any(r.host_probe_s is None for r in cal_rows):
        log.print("  host speed: a run or a profile without a host probe; section left out")
        return result
    speed_rows = at_host_speed(cal_rows, references)
    log.print(f"  host speed: calibration runs' probe {references[2] * 1e3:.3f} ms")
    speed = section(speed_rows, pick) | {
        "reference_probe_s": {str(w): s for w, s in references.items()},
        "pick": pick_details(speed_rows, pick, why),
    }
    return result | {"host_speed": speed}


def calibration_probe_s(runs: dict[str, list[Run]]) -> float | None:
    """Geometric mean of the host probes of the calibration runs the fit uses (each case's
    `typical`): the host speed the calibrated profile describes. None when one lacks it."""
    probes = [typical(runs[c.name]).probe_s for c in CALIBRATION_CASES]
    if any(p is None or p <= 0 for p in probes):
        return None
    return statistics.geometric_mean(probes)


def probe_references(profiles: Profiles, calibration_s: float | None) -> dict[int, float] | None:
    """Per world size, the host probe a run of that size would take at the calibration
    runs' host speed: theirs (2 ranks), scaled for other world sizes by the ratio of the
    profiles' own probes (one rank runs the probe alone, two ranks at once). None when the
    calibration runs or a profile lack the probe."""
    if calibration_s is None:
        return None
    probes = {world: host_probe_s(profile) for world, (_, profile) in profiles.items()}
    base = probes.get(2)
    if base is None or any(p is None for p in probes.values()):
        return None
    return {world: calibration_s * p / base for world, p in probes.items() if p is not None}


def calibrated_profiles(profiles: Profiles, calibrated: HardwareProfile, path: str) -> Profiles:
    """``profiles`` with the 2-rank one replaced by ``calibrated`` and the others scaled by
    its time scale: the executor model's calibration multiplies every compute time of a profile by
    one factor (`reports.calibrate_time`), read back as the ratio of the op overheads."""
    k = calibrated.compute.op_overhead_s / profiles[2][1].compute.op_overhead_s
    return {
        world: (path, calibrated) if world == 2 else (hw, time_scaled(profile, k))
        for world, (hw, profile) in profiles.items()
    }
