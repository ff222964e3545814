"""Fidelity benchmark: predicted against measured iteration time and peak memory of a suite
of small-model plans executed on this machine.

    .venv/bin/python bench/fidelity.py [--json] [--markdown] [--quick] [--calibrate]
                                       [--repeats N] [--draws N] [--work DIR]
                                       [--no-coverage] [--render RESULT.json]

Order of a run:

1. profile this machine (`paraplan profile --quick`) per world size of the suite, 2 ranks
   and 1 (one rank runs both cores' threads, two ranks one thread each), ``--draws`` times
   (3; --quick: 1) spread over the rounds of step 2, into ``WORK/profiles/``; the plans of
   each world size are predicted on the median of its draws (`fidelity_profiles`,
   ``WORK/profile.json`` for 2 ranks, ``WORK/profile-1.json`` for 1), each draw reused
   while it was measured on this host; a draw during which the hypervisor took more than
   `fidelity_suite.STEAL_LIMIT` of the machine's CPU is set aside (listed in ``set_aside``)
   and drawn again;
2. execute every plan of `timing_suite` (world sizes 1 and 2: this machine has two cores)
   with the executor, round by round, and predict it with the cost model on the profile
   of its world size;
   every plan runs ``--repeats`` times (5 by default), one run of each plan per round, so
   a spell of a shared host (fast or slow, tens of seconds to minutes) lands on different
   plans in different rounds. A run's time is the median of its unprofiled timed steps; the
   plan's measured iteration time is that of its middle run
   (`reports.fidelity.median_run`), the measured memory the first run's fullest rank's
   peak. Rows keep their run count and run-to-run spread. A run during which the
   hypervisor took more than `fidelity_suite.STEAL_LIMIT` of the machine's CPU time is set
   aside (listed in ``set_aside``) and the plan runs again in a further round;
3. search the plans of the suite's main group (tiny, 2 ranks, the suite's job) with
   `planner.search.search_plans`; its pick is executed too unless it is one of the suite's
   plans, and the pick rule compares it with the fastest measured plan of the group;
4. summarize (`reports.fidelity.summarize`): median and p90 absolute iteration-time error,
   median absolute memory error, Kendall tau of the two orders, the pick rule;
5. unless ``--no-coverage`` or ``--quick``: the world-size-4 plans of `coverage_suite`
   (4 ranks on 2 cores, so their times measure contention as much as the plan), predicted
   on a 4-rank profile (``WORK/profile-4.json``), summarized separately;
6. with ``--calibrate``: `paraplan calibrate` fits a profile per world size on its
   `CALIBRATION_CASES` (2 ranks and 1; the world-size-4 profile takes the 2-rank fit's
   scales): other plans of the suite's job, not in the suite, run in the suite's rounds
   (so their runs see the same spells of the host as the suite's), every run of each
   brought to their mean host speed by its host probe (``--host-speed`` with the
   elasticity of the 2-rank runs; without probes the middle run of each); every figure is
   given again with the calibrated predictions.

``--quick`` measures fewer steps, runs each plan once, profiles once and skips the coverage
plans. The
machine may be shared: the load average at the start and the end is part of the output. The
result is saved as ``WORK/fidelity.json``; ``--render`` prints a saved one again (as tables,
``--markdown`` or ``--json``) without running anything. ``--json`` prints the summary keys
of `reports.fidelity.summary_to_json`, ``rows``, ``pick``, ``calibrated`` and ``coverage``
(each with its own summary keys and rows), ``failures``, ``set_aside``, ``machine`` and
``load_average``.
Exit code 1 when a run failed (it is listed in ``failures``; the others are still
summarized).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import torch
from fidelity_calibration import calibrated_section
from fidelity_pick import add_pick, pick_details, planner_choice, section
from fidelity_profiles import ProfileDraws, measured_profiles
from fidelity_rounds import measure_rounds, run_case, run_suite
from fidelity_suite import (
    CALIBRATION_CASES,
    PICK_CASE,
    Case,
    Settings,
    case_row,
    coverage_suite,
    timing_suite,
)
from rich.console import Console
from rich.markup import escape

from profiles.schema import HardwareProfile
from reports.fidelity import FidelityRow
from reports.fidelity_tables import markdown, print_tables
from specs.host import available_cpus


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--quick", action="store_true", help="fewer steps, no coverage plans")
    parser.add_argument("--calibrate", action="store_true", help="also with a calibrated profile")
    parser.add_argument("--no-coverage", action="store_true", help="skip the world-4 plans")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="runs per plan, round by round; the middle run counts (5; --quick: 1)",
    )
    parser.add_argument(
        "--draws",
        type=int,
        default=3,
        help="profiles per world size across the rounds, predicted on their median (3; --quick: 1)",
    )
    parser.add_argument("--work", default="runs/fidelity", help="work folder (runs/fidelity)")
    parser.add_argument(
        "--render", metavar="RESULT.json", help="print a saved result (WORK/fidelity.json) again"
    )
    args = parser.parse_args(argv)
    if args.render and not Path(args.render).is_file():
        parser.error(f"--render {args.render}: no such file (a bench writes WORK/fidelity.json)")
    for name in ("repeats", "draws"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def machine_line(profile: HardwareProfile) -> str:
    """Host, device and software of the measurement."""
    return (
        f"{profile.provenance.host}, {available_cpus()} usable cores, {profile.device.name}, "
        f"torch {torch.__version__}, {date.today().isoformat()}"
    )


def coverage_section(
    settings: Settings,
    log: Console,
    failures: list[dict[str, str]],
    set_aside: list[dict[str, Any]],
) -> dict[str, Any]:
    """The world-size-4 plans on a 4-rank profile."""
    log.print("coverage plans (world size 4 on this machine, reported separately):")
    profiles = measured_profiles(settings, (4,), log)
    rows = run_suite(coverage_suite(), profiles, settings, log, failures, set_aside)
    return section(rows)


STEPS = 16
"""Measured steps per run (the last two profiled): 14 timed steps, whose median moves less
with a shared host's single slow steps than the 6 timed steps of an 8-step run."""


def run_bench(args: argparse.Namespace, log: Console) -> dict[str, Any]:
    """Profile, execute, predict and summarize (module docstring); the result as JSON."""
    settings = Settings(
        work=Path(args.work),
        steps=5 if args.quick else STEPS,
        warmup=1 if args.quick else 2,
        precision="bf16" if torch.cuda.is_available() else "fp32",
        repeats=1 if args.quick else args.repeats,
        draws=1 if args.quick else args.draws,
    )
    settings.work.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    log.print(f"fidelity bench in {settings.work}; load average {load_start}")
    cases, failures, set_aside = list(timing_suite()), [], []
    worlds = (2, *{c.plan.world_size for c in cases} - {2})
    draws = ProfileDraws(settings, worlds, log, set_aside)
    calibration = CALIBRATION_CASES if args.calibrate else ()
    log.print(
        f"timing plans ({len(cases)}, world sizes 1-2)"
        + (
            f", with the {len(calibration)} calibration runs in the same rounds"
            if calibration
            else ""
        )
        + ":"
    )
    measured = measure_rounds(
        (*cases, *calibration),
        draws.paths(),
        settings,
        log,
        failures,
        draws.before_round,
        set_aside=set_aside,
    )
    profiles = draws.merged()
    hardware, profile = profiles[2]
    rows = [case_row(c, profiles, settings, measured[c.name]) for c in cases if c.name in measured]

    def run(case: Case) -> FidelityRow:
        log.print(f"  executing the planner's pick {case.plan.label()} (not in the suite)")
        return run_case(
            case, profiles, settings, log, failures, measured, "the planner's pick", set_aside
        )

    main_case = next(c for c in cases if c.name == PICK_CASE)
    plan, why = planner_choice(main_case, profile, hardware, settings.precision)
    if plan is None:
        log.print(f"  planner pick: none ({escape(why)})")
    pick = add_pick(plan, "planner-pick", cases, rows, run) if plan else None
    extra: dict[str, Any] = {}
    if args.calibrate:
        extra["calibrated"] = calibrated_section(
            profiles, cases, rows, settings, log, run, measured
        )
    if not (args.quick or args.no_coverage):
        extra["coverage"] = coverage_section(settings, log, failures, set_aside)
    result = section(rows, pick) | {"pick": pick_details(rows, pick, why)} | extra
    result["failures"] = failures
    result["set_aside"] = set_aside
    result["machine"] = machine_line(profile)
    result["load_average"] = {"start": load_start, "end": os.getloadavg()}
    (settings.work / "fidelity.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = Console(stderr=True, highlight=False, soft_wrap=True)
    start = time.perf_counter()
    if args.render:
        result = json.loads(Path(args.render).read_text())
    else:
        result = run_bench(args, log)
        log.print(
            f"done in {time.perf_counter() - start:.0f} s; result in {args.work}/fidelity.json"
        )
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif args.markdown:
        sys.stdout.write(markdown(result) + "\n")
    else:
        print_tables(result)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
