"""Building blocks of the plan rules: the `Violation` record, the `rule` decorator and the
helpers that compute a concrete fix from the numbers.

A rule is written as a check that returns a message (``str``) when the plan breaks it and
``None`` otherwise; `rule` turns it into a `Rule` that returns a `Violation` whose id is the
check's function name, so an id can never drift from the function that owns it. The rules
themselves live in `specs.rules` (world size, tensor-parallel shapes, pipeline, batch),
`specs.rules_moe` (experts) and `specs.rules_features` (context and sequence parallelism,
overlap switches, recompute, position table).

Conventions for messages (STYLE.md recommendation 4): the relation, every operand as
``field (value)``, the derived context, then a fix computed from the numbers, e.g.
``num_layers (30) must be divisible by pp (4) (7.50 layers per stage): try pp in {1, 2, 3, 5, 6}``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

MAX_SUGGESTIONS = 5
"""How many candidate values a fix lists at most (the ones closest to the requested value)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """One broken rule of a plan, as reported by `specs.rules.check_plan`."""

    rule: str
    """Stable snake_case id of the rule (the name of its function, listed in
    `specs.rules.RULES`); tests and the planner's pruning counts key on it."""
    message: str
    """The relation, the operands with their values, the derived context and a fix."""

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


Check = Callable[[ModelSpec, ClusterSpec, TrainingJob, ParallelPlan], str | None]
"""A rule's body: the message when the plan breaks the rule, else None."""


class Rule(Protocol):
    """A named rule: ``rule(model, cluster, job, plan) -> Violation | None``; its
    ``__name__`` is the rule id."""

    __name__: str

    def __call__(
        self, model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan, /
    ) -> Violation | None: ...


def rule(check: Check) -> Rule:
    """Wrap a check returning a message (or None) into a rule returning a `Violation`.

    The violation's id is ``check.__name__``; the wrapper keeps the name and docstring.
    """

    @functools.wraps(check)
    def run(
        model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
    ) -> Violation | None:
        message = check(model, cluster, job, plan)
        return None if message is None else Violation(rule=check.__name__, message=message)

    return run


# ---- fixes computed from the numbers -------------------------------------------------


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` (n >= 1), ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def nearest(candidates: Iterable[int], target: int, limit: int = MAX_SUGGESTIONS) -> list[int]:
    """The ``limit`` candidates closest to ``target`` (ties favour the smaller), ascending."""
    ranked = sorted(set(candidates), key=lambda c: (abs(c - target), c))
    return sorted(ranked[:limit])


def fmt_set(values: Iterable[int]) -> str:
    """``{1, 2, 4}``: how a fix lists candidate values."""
    return "{" + ", ".join(str(v) for v in values) + "}"


def degree_choices(
    n: int, requested: int, num_gpus: int | None = None, keep: Callable[[int], bool] | None = None
) -> str:
    """Divisors of ``n`` near ``requested``, formatted as a set.

    With ``num_gpus`` only degrees that also divide the GPU count are offered (a degree that
    does not divide the world cannot tile it); ``keep`` filters further.
    """
    base = math.gcd(n, num_gpus) if num_gpus is not None else n
    options = [d for d in divisors(base) if keep is None or keep(d)]
    return fmt_set(nearest(options, requested))


def multiples_around(value: int, step: int) -> str:
    """The multiples of ``step`` just below and just above ``value`` (positive ones only)."""
    low = value // step * step
    return fmt_set(v for v in (low, low + step) if v > 0)


def ratio(numerator: int, denominator: int) -> str:
    """``numerator / denominator`` as a short number, for the derived context of a message."""
    whole, rest = divmod(numerator, denominator)
    return str(whole) if rest == 0 else f"{numerator / denominator:.2f}"
