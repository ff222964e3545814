"""The fidelity benchmark's planner pick and section summaries (`bench/fidelity.py`): the
plan `planner.search.search_plans` picks for the main problem, the row it is measured as,
the pick rule's details, and one section's summary keys and rows.

bench/ is not a package: `bench/fidelity.py` imports this file as a sibling script does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fidelity_suite import PICK_CASE, Case, bundle_of

from costmodel.execution_presets import TORCH_OPTIONS
from planner.search import search_plans
from profiles.schema import HardwareProfile
from reports.fidelity import FidelityRow, row_to_json, summarize, summary_to_json
from specs.errors import SpecError
from specs.plan import ParallelPlan


def planner_choice(
    case: Case, profile: HardwareProfile, hardware: str, precision: str
) -> tuple[ParallelPlan | None, str]:
    """`search_plans`' best plan for the problem (model, world, job) of ``case``, or None
    and the reason."""
    b = bundle_of(case, hardware, precision)
    try:
        result = search_plans(b.model, b.cluster, b.job, profile, top_k=5, options=TORCH_OPTIONS)
    except SpecError as exc:
        return None, f"search_plans failed: {exc}"
    if result.best is None:
        return None, "search_plans found no plan that fits"
    return result.best.plan, ""


def add_pick(
    plan: ParallelPlan,
    name: str,
    cases: list[Case],
    rows: list[FidelityRow],
    run: Callable[[Case], FidelityRow],
) -> str:
    """The row name of ``plan`` in the group of `PICK_CASE`: a measured suite plan, or a new
    case ``name`` that ``run(case)`` executes and appends to ``cases`` and ``rows``."""
    main = next(c for c in cases if c.name == PICK_CASE)
    done = {r.name for r in rows}
    for case in cases:
        if case.group == main.group and case.plan == plan and case.name in done:
            return case.name
    pick = Case(name=name, model=main.model, plan=plan, covers=("planner-pick",))
    cases.append(pick)
    rows.append(run(pick))
    return name


def pick_details(rows: list[FidelityRow], name: str | None, why: str) -> dict[str, Any]:
    """The pick, the fastest measured plan of its group, and the reason when there is none."""
    if name is None:
        return {"row": None, "error": why}
    chosen = next(r for r in rows if r.name == name)
    best = min((r for r in rows if r.group == chosen.group), key=lambda r: r.measured_time_s)
    return {
        "row": name,
        "plan": chosen.plan,
        "group": chosen.group,
        "measured_s": chosen.measured_time_s,
        "best_measured": best.name,
        "best_measured_s": best.measured_time_s,
    }


def section(rows: list[FidelityRow], pick: str | None = None) -> dict[str, Any]:
    """Summary keys and rows of one section of the result (`reports.fidelity`)."""
    return {**summary_to_json(summarize(rows, pick)), "rows": [row_to_json(r) for r in rows]}
