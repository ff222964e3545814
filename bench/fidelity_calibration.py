"""The fidelity benchmark's calibrated section (`bench/fidelity.py --calibrate`): a profile
fitted by `paraplan calibrate` on the calibration runs, every row predicted again with it,
and the host-speed view of those rows (`reports.host_speed`).

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

from fidelity_pick import add_pick, pick_details, planner_choice, section
from fidelity_suite import (
    PICK_CASE,
    REFERENCE_WORLD,
    Case,
    Profiles,
    Run,
    Settings,
    bundle_of,
    calibration_cases,
    predict,
    profile_for,
    quiet_indices,
    quiet_runs,
    run_folder,
    typical,
    typical_index,
)
from rich.console import Console
from rich.markup import escape

from costmodel.runtimes.torch.host_rates import backward_scale, layer_collective_scale
from paraplan.commands.demo import run_command
from profiles.lookup import host_probe_s
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from reports.calibrate_factors import (
    time_scaled,
    with_backward_scale,
    with_layer_collective_scale,
)
from reports.fidelity import FidelityRow, summarize
from reports.host_speed import at_host_speed, host_elasticity, measured_at_reference
from specs.errors import SpecError


def calibrate_profile(
    profile_path: Path,
    runs: dict[str, list[Run]],
    settings: Settings,
    log: Console,
    elasticity: float | None = None,
    world: int = REFERENCE_WORLD,
) -> Path:
    """Fit ``WORK/profile-calibrated.json`` (``-w<world>`` for another world size) with
    `paraplan calibrate` on the runs of the calibration cases of ``world`` ranks
    (`calibration_cases`; ``runs``: measured in the suite's rounds, `run_bench`): with an
    ``elasticity``, every quiet run of each (`quiet_indices`), brought to the runs' mean
    host speed (``--host-speed``); without one, the middle run of each (`typical`)."""
    try:
        command = importlib.import_module("paraplan.commands.calibrate")
    except ModuleNotFoundError as exc:
        raise SpecError(
            "--calibrate needs `paraplan calibrate` (paraplan/commands/calibrate.py), which "
            "this checkout lacks; run the bench without --calibrate"
        ) from exc
    base = load_profile(str(profile_path))
    cases = calibration_cases(world)
    missing = [c.name for c in cases if c.name not in runs]
    if missing:
        raise SpecError(f"calibration runs failed ({', '.join(missing)}); see the failures")
    folders = []
    for case in cases:
        done = runs[case.name]
        chosen = quiet_indices(done) if elasticity is not None else [typical_index(done)]
        for index in chosen:
            out = run_folder(settings, case, index)
            predict(bundle_of(case, str(profile_path), settings.precision), base, out)
            folders.append(str(out))
        seconds = ", ".join(f"{done[i].seconds:.4f}" for i in chosen)
        log.print(f"  calibration runs of {case.name} ({case.plan.label()}): {seconds} s")
    path = settings.work / _calibrated_name(world)
    argv = [*folders, "-o", str(path), "--hardware", str(profile_path)]
    if elasticity is not None:
        argv += ["--host-speed", repr(elasticity)]
    # the command's printout (fitted factors, errors before and after) is progress here
    with contextlib.redirect_stdout(sys.stderr):
        code = run_command(command, argv)
    if code != 0:
        raise SpecError(f"paraplan calibrate {' '.join(argv)} failed (exit {code})")
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
    measured: dict[str, list[Run]],
) -> dict[str, Any]:
    """Fit a profile on the calibration runs of each world size that has them
    (`calibration_cases`); the figures of every row predicted with them (the calibrated
    profile's own pick is executed when it is a new plan). The profiles of other world
    sizes take the 2-rank fit's scales (`calibrated_profiles`). With host probes in every
    run, also the host-speed view (`host_speed_section`). ``measured`` holds every case's
    runs (a pick executed here joins it)."""
    log.print("calibration (runs outside the suite):")
    elasticity, why_not = calibration_elasticity(measured)
    fitted = {
        world: str(calibrate_profile(Path(hw), measured, settings, log, elasticity, world))
        for world, (hw, _) in profiles.items()
        if calibration_cases(world)
    }
    calibrated = calibrated_profiles(
        profiles, {world: (path, load_profile(path)) for world, path in fitted.items()}
    )
    path, profile = calibrated[REFERENCE_WORLD]
    main_case = next(c for c in cases if c.name == PICK_CASE)
    plan, why = planner_choice(main_case, profile, path, settings.precision)
    if plan is None:
        log.print(f"  calibrated planner pick: none ({escape(why)})")
    pick = add_pick(plan, "calibrated-pick", cases, rows, run) if plan else None
    cal_rows = repredicted(rows, cases, calibrated, settings)
    scales = {
        str(world): {
            "profile": calibrated[world][0],
            "backward_scale": backward_scale(calibrated[world][1]),
            "time_scale": fitted_time_scale(profiles, calibrated[world][1], world),
            "layer_collective_scale": layer_collective_scale(calibrated[world][1]),
        }
        for world in fitted
    }
    result = (
        section(cal_rows, pick)
        | scales[str(REFERENCE_WORLD)]
        | {
            "by_world": scales,
            "pick": pick_details(cal_rows, pick, why),
        }
    )
    for world, fit in scales.items():
        log.print(
            f"  calibrated ({world} rank(s)): backward scale {fit['backward_scale']:.3f}, "
            f"time scale {fit['time_scale']:.3f}, layer collectives "
            f"x{fit['layer_collective_scale']:.3f}"
        )
    if elasticity is None:
        log.print(f"  host speed: section left out ({escape(why_not)})")
        return result
    speed = host_speed_section(profiles, cal_rows, measured, elasticity, pick, why)
    log.print(
        f"  host speed: elasticity {elasticity:.2f}, calibration runs' probe "
        f"{speed['reference_probe_s'][str(REFERENCE_WORLD)] * 1e3:.3f} ms"
    )
    return result | {"host_speed": speed}


def _calibrated_name(world: int) -> str:
    """The file `calibrate_profile` writes for ``world`` ranks."""
    return f"profile-calibrated{'' if world == REFERENCE_WORLD else f'-w{world}'}.json"


def calibration_elasticity(measured: dict[str, list[Run]]) -> tuple[float | None, str]:
    """(`reports.host_speed.host_elasticity` of the 2-rank calibration runs, "") or (None,
    why)."""
    cases = calibration_cases(REFERENCE_WORLD)
    pairs = {c.name: [(r.seconds, r.probe_s) for r in quiet_runs(measured[c.name])] for c in cases}
    if any(p is None for runs in pairs.values() for _, p in runs):
        return None, "a calibration run without a host probe"
    try:
        return host_elasticity(pairs), ""  # type: ignore[arg-type]
    except SpecError as exc:
        return None, str(exc)


def host_speed_section(
    profiles: Profiles,
    cal_rows: list[FidelityRow],
    measured: dict[str, list[Run]],
    elasticity: float,
    pick: str | None,
    why: str,
) -> dict[str, Any]:
    """The calibrated rows, each plan measured by its middle run at one host speed
    (`typical` with the ``elasticity``) and predicted at that run's host speed
    (`reports.host_speed.at_host_speed`) relative to the calibration runs' probe. The pick
    rule compares the plans' runs brought to the calibration runs' speed
    (`reports.host_speed.measured_at_reference`)."""
    own = {world: calibration_probe_s(measured, world) for world in profiles}
    references = probe_references(profiles, own.pop(REFERENCE_WORLD), own)
    if references is None:
        raise SpecError("host speed: a profile without a host probe; profile again")
    chosen = [typical(measured[r.name], elasticity) for r in cal_rows]
    rows = [
        dataclasses.replace(r, measured_time_s=run.seconds, host_probe_s=run.probe_s)
        for r, run in zip(cal_rows, chosen, strict=True)
    ]
    speed_rows = at_host_speed(rows, references, elasticity)
    # the pick rule compares plans: their runs at one host speed (the calibration runs')
    one_speed = measured_at_reference(rows, references, elasticity)
    return section(speed_rows) | {
        "pick_within_5pct": summarize(one_speed, pick).pick_within_5pct if pick else None,
        "elasticity": elasticity,
        "reference_probe_s": {str(w): s for w, s in references.items()},
        "pick": pick_details(one_speed, pick, why) | {"measured_at": "reference host speed"},
    }


def calibration_probe_s(runs: dict[str, list[Run]], world: int = REFERENCE_WORLD) -> float | None:
    """Geometric mean of the host probes of every quiet calibration run of ``world`` ranks (what
    `paraplan calibrate --host-speed` brings them to): the host speed that world size's
    calibrated profile describes. None without such runs or when one lacks the probe."""
    probes = [r.probe_s for c in calibration_cases(world) for r in quiet_runs(runs.get(c.name, []))]
    if not probes or any(p is None or p <= 0 for p in probes):
        return None
    return statistics.geometric_mean(probes)  # type: ignore[arg-type]


def probe_references(
    profiles: Profiles, calibration_s: float | None, own: dict[int, float | None] | None = None
) -> dict[int, float] | None:
    """Per world size, the host probe a run of that size would take at the host speed its
    calibrated profile describes: its own calibration runs' (``own``, `calibration_probe_s`)
    where it has them, else the 2-rank calibration runs' (``calibration_s``) scaled by the
    ratio of the profiles' own probes (one rank runs the probe alone, two ranks at once).
    None when the calibration runs or a profile lack the probe."""
    if calibration_s is None:
        return None
    probes = {world: host_probe_s(profile) for world, (_, profile) in profiles.items()}
    base = probes.get(REFERENCE_WORLD)
    if base is None or any(p is None for p in probes.values()):
        return None
    mine = {world: s for world, s in (own or {}).items() if s is not None}
    return {
        world: mine.get(world, calibration_s * p / base)
        for world, p in probes.items()
        if p is not None
    }


def calibrated_profiles(
    profiles: Profiles, calibrated: dict[int, tuple[str, HardwareProfile]]
) -> Profiles:
    """``profiles`` with each world size's own calibrated (path, profile) where it has one
    (the 2-rank one at least) and the others given the 2-rank fit's backward scale, time
    scale and layer-collective scale: the executor model's calibration multiplies every
    compute time of a profile by one factor (`reports.calibrate_time`), read back as the
    ratio of the op overheads, and every layer collective by another
    (`reports.calibrate_layers`)."""
    reference = calibrated[REFERENCE_WORLD][1]
    k = fitted_time_scale(profiles, reference)
    split = backward_scale(reference)
    layers = layer_collective_scale(reference)

    def scaled(profile: HardwareProfile) -> HardwareProfile:
        return with_layer_collective_scale(
            time_scaled(with_backward_scale(profile, split), k), layers
        )

    return {
        world: calibrated[world] if world in calibrated else (hw, scaled(profile))
        for world, (hw, profile) in profiles.items()
    }


def fitted_time_scale(
    profiles: Profiles, calibrated: HardwareProfile, world: int = REFERENCE_WORLD
) -> float:
    """A calibration's time scale: the calibrated op overhead over that of the profile of
    ``world`` ranks (`reports.calibrate_factors.time_scaled` multiplies it by the scale)."""
    return calibrated.compute.op_overhead_s / profiles[world][1].compute.op_overhead_s
