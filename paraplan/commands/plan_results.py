"""The JSON form and the result files of a plan search (`paraplan plan --num-gpus N`).

`plan_entry` is a plan's row in every JSON of the command (search and cluster sizing);
`search_json` is the ``--json`` output of the search; `write_search_outputs` writes the
``--out`` folder of the search (also used by `paraplan demo`). The planner, the cost model
and pandas are imported inside the functions, so importing this module loads none of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costmodel.execution import ExecutionOptions
from costmodel.execution_record import record_options
from profiles import load_profile
from reports.html import render_report
from specs.bundle import PlanBundle
from specs.serde import dumps, to_dict

if TYPE_CHECKING:
    import pandas as pd

    from planner.search_result import RankedPlan, SearchResult

DEFAULT_CANDIDATES_LIMIT = 1000
"""Screened candidates written to candidates.csv by default (the best by screened tokens/s)."""


def plan_entry(ranked: RankedPlan) -> dict[str, Any]:
    """A plan's knobs (ParallelPlan field names) with the metrics of `estimate --json`."""
    from costmodel.estimate import estimate_to_json

    return {**to_dict(ranked.plan), "label": ranked.plan.label()} | estimate_to_json(
        ranked.estimate
    )


def time_limit_json(result: SearchResult) -> dict[str, Any]:
    """The ``time_limit`` entry of `search_json`: the limit, whether it cut the search short,
    the valid candidates, those screened and those not reached, the picks simulated and
    those not, and the explanation's sentence (empty when not reached)."""
    from planner.explain import time_limit_note

    return {
        "limit_s": result.time_limit_s,
        "reached": result.time_limit_reached,
        "valid": result.num_valid,
        "screened": result.num_screened,
        "not_reached": result.num_unvisited,
        "simulated": result.num_simulated,
        "not_simulated": result.num_unsimulated,
        "note": time_limit_note(result),
    }


def search_json(result: SearchResult) -> dict[str, Any]:
    """``{"best", "top", "rejected"}``, ``closest`` when nothing fits, ``time_limit``
    (`time_limit_json`) when the search had one, and ``lora`` (the job's adapters) for a
    LoRA job."""
    data: dict[str, Any] = {
        "best": plan_entry(result.best) if result.best else None,
        "top": [plan_entry(r) for r in result.top],
        "rejected": dict(result.rejected),
    }
    if result.best is None:
        data["closest"] = [plan_entry(r) for r in result.closest]
    if result.time_limit_s is not None:
        data["time_limit"] = time_limit_json(result)
    if result.job.lora is not None:
        data["lora"] = to_dict(result.job.lora)
    return data


def limit_candidates(frame: pd.DataFrame, limit: int) -> pd.DataFrame:
    """The rows of `SearchResult.candidates` that candidates.csv keeps: every simulated plan,
    every rule-rejected representative, and the ``limit`` other candidates with the highest
    screened tokens/s (fitting ones first, those never screened last); ``limit`` 0 keeps
    every row. Row order is kept."""
    from planner.search_result import BOUND_REJECTION, MEMORY_REJECTION, TIME_LIMIT_REJECTION

    if limit <= 0:
        return frame
    simulated = frame["simulated_iteration_time_s"].notna()
    not_rules = ["", MEMORY_REJECTION, BOUND_REJECTION, TIME_LIMIT_REJECTION]
    by_rule = ~frame["rejected_by"].isin(not_rules)
    rest = frame[~simulated & ~by_rule]
    ranked = rest.assign(_over=rest["rejected_by"] != "").sort_values(
        ["_over", "tokens_per_s"], ascending=[True, False], kind="stable"
    )
    keep = frame.index[simulated | by_rule].union(ranked.index[:limit])
    return frame.loc[keep.sort_values()]


def write_search_outputs(
    result: SearchResult,
    profile_name: str,
    out: Path,
    text: str,
    candidates_limit: int = DEFAULT_CANDIDATES_LIMIT,
    *,
    options: ExecutionOptions,
) -> None:
    """plan.json (with the ``options`` the search priced with:
    `costmodel.execution_record.record_options`), estimate.json, predicted.json,
    prediction.trace.json and plan.html (the prediction-only report) when a plan fits;
    candidates.csv (`limit_candidates`) and candidates.json always. The timeline is
    simulated with the ``options`` the search priced with (runtime and recipe settings)."""
    from costmodel.estimate import estimate_to_json, simulate_plan

    out.mkdir(parents=True, exist_ok=True)
    limit_candidates(result.candidates, candidates_limit).to_csv(
        out / "candidates.csv", index=False
    )
    listed = result.top or result.closest
    (out / "candidates.json").write_text(
        json.dumps({"plans": [plan_entry(r) for r in listed], "explanation": text}, indent=2) + "\n"
    )
    if result.best is None:
        return
    bundle = PlanBundle(
        model=result.model,
        cluster=result.cluster,
        job=result.job,
        plan=result.best.plan,
        execution=record_options(options),
    )
    (out / "plan.json").write_text(dumps(bundle) + "\n")
    (out / "estimate.json").write_text(
        json.dumps(estimate_to_json(result.best.estimate), indent=2) + "\n"
    )
    _, timeline = simulate_plan(
        bundle.model,
        bundle.cluster,
        bundle.job,
        bundle.plan,
        load_profile(profile_name),
        options=options,
    )
    if timeline is not None:
        trace = json.dumps(timeline.to_chrome_trace())
        (out / "prediction.trace.json").write_text(trace + "\n")
        (out / "predicted.json").write_text(dumps(timeline))
        page = render_report(
            bundle,
            estimate_to_json(result.best.estimate),
            timeline,
            candidates={"plans": [plan_entry(r) for r in listed], "explanation": text},
        )
        (out / "plan.html").write_text(page)
