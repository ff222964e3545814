"""Enumerate and check: the candidate plans of a `SearchSpace` that pass `check_plan`, with
the number of candidates each rule rejected.

Checking every candidate one by one would cost about 40 µs each (building a `ParallelPlan`
and running every rule), seconds for the hundreds of thousands of candidates of a large
cluster. The check is therefore done on the two tables of `planner.space_tables`:

1. every degree row is checked with neutral switches (no sequence parallelism, no overlap,
   no recompute, no distributed optimizer; no rule rejects those), save the ones the model
   requires at its tp and cp (`planner.space_tables.required_switches`: DeepSeek sparse
   attention's sequence parallelism and all-gather); a rejected row removes
   all its switch combinations, and each rule it breaks is counted once per candidate
   removed;
2. switch combinations are generated legal for their context (each generator mirrors the
   rule it cites; `tests/planner/test_space.py` checks that on random spaces), so they are
   checked only when the user fixed a switch: then each combination is checked once with a
   valid degree row of its context, and counted once per degree row of that context.

The search re-checks every plan it hands to the event simulator with the full
`check_plan`, so a plan that slipped through is still never returned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from planner.space import CONTEXT_COLUMNS, SWITCH_COLUMNS, SearchSpace, plan_from_row
from planner.space_tables import (
    degree_table,
    expand,
    neutral_switches,
    required_switches,
    switch_table,
)
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.rules import check_plan

Progress = Callable[[str, int, int], None]
"""Progress callback: (phase, done, total)."""


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class CandidateSet:
    """The candidates that passed the rules, and what the rules rejected."""

    table: pd.DataFrame
    """One row per valid candidate, columns `planner.space.PLAN_COLUMNS`."""
    rejected: Mapping[str, int]
    """Rule id -> candidates that break it (a candidate breaking two rules counts twice)."""
    examples: Mapping[str, str]
    """Rule id -> the message of one violation, with its fix."""
    rejected_rows: pd.DataFrame
    """One representative row per rejected degree row or switch combination: the plan
    columns, ``rejected_by`` (rule ids joined by ``;``) and ``represents`` (candidates)."""
    num_enumerated: int
    """Candidates before the check: valid ones plus every rejected one."""


def _check_rows(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    rows: list[dict[str, Any]],
    progress: Progress | None,
) -> list[list[tuple[str, str]]]:
    """(rule id, message) violations of every row, in order."""
    found = []
    step = max(1, len(rows) // 20)
    for i, row in enumerate(rows):
        violations = check_plan(model, cluster, job, plan_from_row(row, model))
        found.append([(v.rule, v.message) for v in violations])
        if progress is not None and i % step == 0:
            progress("check", i, len(rows))
    return found


def _record(
    counts: Counter[str],
    examples: dict[str, str],
    rejected: list[dict[str, Any]],
    row: dict[str, Any],
    violations: list[tuple[str, str]],
    weight: int,
) -> None:
    for rule, message in violations:
        counts[rule] += weight
        examples.setdefault(rule, message)
    rejected.append(row | {"rejected_by": ";".join(r for r, _ in violations), "represents": weight})


def enumerate_candidates(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    space: SearchSpace,
    scale_up_domain: int,
    progress: Progress | None = None,
) -> CandidateSet:
    """Every candidate of ``space`` that passes `check_plan`, and the rejection counts."""
    degrees = degree_table(model, cluster.num_gpus, job, space, scale_up_domain)
    switches = switch_table(model, job, space, degrees)
    keys = list(CONTEXT_COLUMNS)
    per_context = switches.groupby(keys).size().to_dict()
    neutral = neutral_switches()
    degree_rows = degrees.to_dict("records")
    checked = [r | neutral | required_switches(model, r["tp"], r["cp"]) for r in degree_rows]
    verdicts = _check_rows(model, cluster, job, checked, progress)
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    rejected: list[dict[str, Any]] = []
    valid_rows = []
    for row, full, violations in zip(degree_rows, checked, verdicts, strict=True):
        weight = per_context.get(tuple(row[k] for k in keys), 0)
        if violations:
            _record(counts, examples, rejected, full, violations, weight)
        else:
            valid_rows.append(row)
    valid = pd.DataFrame(valid_rows, columns=degrees.columns)
    if any(space.is_fixed(name) for name in SWITCH_COLUMNS) and len(valid):
        switches = _check_switches(
            model, cluster, job, valid, switches, (counts, examples, rejected), progress
        )
    table = expand(valid, switches)
    enumerated = len(table) + sum(int(r["represents"]) for r in rejected)
    return CandidateSet(
        table=table,
        rejected=dict(counts),
        examples=examples,
        rejected_rows=pd.DataFrame(rejected),
        num_enumerated=enumerated,
    )


def _check_switches(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    valid: pd.DataFrame,
    switches: pd.DataFrame,
    sink: tuple[Counter[str], dict[str, str], list[dict[str, Any]]],
    progress: Progress | None,
) -> pd.DataFrame:
    """Switch rows that pass `check_plan` with a valid degree row of their context."""
    keys = list(CONTEXT_COLUMNS)
    rows_per_context = valid.groupby(keys).size().to_dict()
    representative = valid.drop_duplicates(keys)
    combined_table = switches.merge(representative, on=keys, how="inner")
    combined = combined_table.to_dict("records")
    switch_rows = combined_table[list(switches.columns)].to_dict("records")
    verdicts = _check_rows(model, cluster, job, combined, progress)
    kept = []
    for row, full, violations in zip(switch_rows, combined, verdicts, strict=True):
        if violations:
            weight = rows_per_context[tuple(row[k] for k in keys)]
            _record(*sink, full, violations, weight)
        else:
            kept.append(row)
    return pd.DataFrame(kept, columns=switches.columns)
