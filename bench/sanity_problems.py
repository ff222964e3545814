"""Rows of the search sanity (`search_sanity.py`) grouped into distinct problems and recipes.

Many published rows repeat one training problem: Megatron-Bridge publishes the same model,
cluster, sequence, global batch, precision and software settings in release after release,
often with the same plan. The planner's search depends only on the problem, so
`recipes_of` groups the rows:

- a *problem* is what the search sees (`problem_key`): the model shape (its name left out:
  ``DeepSeekV3`` and ``DeepSeekV3 (w/o MTP)`` of one shape are one problem), the cluster
  (stored profile and GPU count), the job (sequence, global batch, precision) and the
  execution options of the row (`row_options.options_for_row`: software era, CUDA graph
  scopes, MoE dispatcher, FP8 recipe, ...); rows whose options differ are searched apart,
  since the search prices every plan with them;
- a *recipe* is one published plan of a problem; rows of one problem with the same plan
  are one recipe (same prediction, same rank), listed by all their row ids.

`summaries` gives the median claimed speedup and the top-10 shares over recipes, by
dense/MoE, GPU generation and stored profile.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from published_rows import NotExpressible, RowCase, case_for_row

from specs.errors import SpecError

KINDS = ("dense", "moe", "all")
"""Values of ``--kinds``: rows of dense models, of MoE models, or both."""

SUMMARY_GROUPS = ("trust", "kind", "generation", "hardware")
"""Result keys the summaries are grouped by: trust level, dense/MoE, GPU generation
(`published_rows.gpu_generation`: A100, H100/H800, Blackwell) and stored profile."""

ProblemKey = tuple[object, ...]
"""What one search depends on: model shape, cluster, job, execution options."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Recipe:
    """One published plan of one distinct problem, with every row that publishes it."""

    case: RowCase
    """The first row's case; the other rows' differ at most in the model's name."""
    rows: tuple[dict[str, str], ...]
    """The CSV rows of this plan and problem, in file order."""
    problem: int
    """Index of the problem among the distinct problems, in order of first appearance."""

    @property
    def row_ids(self) -> tuple[str, ...]:
        """The rows' ``row_id`` values."""
        return tuple(raw["row_id"] for raw in self.rows)

    @property
    def kind(self) -> str:
        """``moe`` for a model with experts, else ``dense``."""
        return model_kind(self.case)


def model_kind(case: RowCase) -> str:
    """``moe`` when the case's model has experts, else ``dense``."""
    return "moe" if case.model.num_experts else "dense"


def problem_key(case: RowCase) -> ProblemKey:
    """The inputs a search of ``case`` depends on (see the module docstring); the model's
    name is replaced by a fixed one, as no cost reads it."""
    shape = dataclasses.replace(case.model, name="model")
    return (shape, case.cluster, case.job, case.options)


def parse_trusts(text: str) -> tuple[str, ...]:
    """The trust levels of a ``--trust`` value (comma-separated, e.g. ``A,B``)."""
    trusts = tuple(t.strip().upper() for t in text.split(",") if t.strip())
    bad = [t for t in trusts if t not in ("A", "B", "C")]
    if not trusts or bad:
        raise SpecError(f"--trust takes A, B or C comma-separated, got {text!r}; e.g. --trust A,B")
    return trusts


def recipes_of(
    rows: Iterable[dict[str, str]],
    trusts: Sequence[str] = ("A",),
    kind: str = "all",
    case_of: Callable[[dict[str, str]], RowCase] = case_for_row,
) -> tuple[list[Recipe], list[dict[str, str]]]:
    """The distinct recipes of the ``rows`` of the ``trusts`` levels and model ``kind``
    (`KINDS`), in file order of their first row, and the rows whose configuration is not
    complete (``row_id`` and the reason). ``case_of`` turns a row into its case."""
    if kind not in KINDS:
        raise SpecError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    problems: dict[ProblemKey, int] = {}
    grouped: dict[tuple[ProblemKey, object], list[tuple[RowCase, dict[str, str]]]] = {}
    apart = []
    for raw in rows:
        if raw["trust"] not in trusts:
            continue
        try:
            case = case_of(raw)
        except (NotExpressible, SpecError) as err:
            apart.append({"row_id": raw["row_id"], "reason": failure_reason(err)})
            continue
        if kind != "all" and model_kind(case) != kind:
            continue
        key = problem_key(case)
        problems.setdefault(key, len(problems))
        grouped.setdefault((key, case.plan), []).append((case, raw))
    recipes = [
        Recipe(case=members[0][0], rows=tuple(raw for _, raw in members), problem=problems[key])
        for (key, _), members in grouped.items()
    ]
    return recipes, apart


def failure_reason(err: Exception) -> str:
    """The last line of an error's message (the rule that failed), without list dashes."""
    lines = str(err).splitlines()
    return lines[-1].strip(" -") if len(lines) > 1 else lines[0]


def first_problems(recipes: list[Recipe], limit: int | None) -> list[Recipe]:
    """The recipes of the first ``limit`` distinct problems (all when None)."""
    if limit is None:
        return recipes
    if limit < 1:
        raise SpecError(f"--limit must be >= 1, got {limit}")
    return [r for r in recipes if r.problem < limit]


def summary(results: Sequence[dict[str, object]], top_k: int) -> dict[str, object]:
    """Over per-recipe ``results`` (`search_sanity.sanity_case` rows): how many, the median
    claimed speedup (also held to the recipe's recompute) and the shares of recipes within
    the planner's ``top_k``, plain and within error; None where there are no results."""

    def median(key: str) -> float | None:
        values = [float(r[key]) for r in results]  # type: ignore[arg-type]
        return statistics.median(values) if values else None

    def top_share(key: str) -> float | None:
        in_top = [int(r[key]) <= top_k for r in results]  # type: ignore[call-overload]
        return sum(in_top) / len(in_top) if in_top else None

    return {
        "num_recipes": len(results),
        "median_claimed_speedup": median("claimed_speedup"),
        "recipe_in_top10_fraction": top_share("recipe_rank"),
        "median_same_recompute_speedup": median("same_recompute_speedup"),
        "same_recompute_in_top10_fraction": top_share("same_recompute_rank"),
        "recipe_in_top10_within_error_fraction": top_share("recipe_rank_within_error"),
        "same_recompute_in_top10_within_error_fraction": top_share(
            "same_recompute_rank_within_error"
        ),
    }


def summaries(results: Sequence[dict[str, object]], top_k: int) -> dict[str, dict[str, object]]:
    """`summary` per value of each of `SUMMARY_GROUPS` (``"kind=moe"``,
    ``"generation=Blackwell"``, ``"hardware=b200"``, ...), and per trust, kind and
    generation together (``"B: moe, Blackwell"``)."""
    groups: dict[str, list[dict[str, object]]] = {}
    for r in results:
        for name in SUMMARY_GROUPS:
            groups.setdefault(f"{name}={r[name]}", []).append(r)
        groups.setdefault(f"{r['trust']}: {r['kind']}, {r['generation']}", []).append(r)
    return {name: summary(members, top_k) for name, members in sorted(groups.items())}
