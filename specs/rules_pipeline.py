"""Rules of the uneven pipeline split: first/last stage counts, the account-for flags and
the pipeline layout, each the rule form of a check in `specs.pipeline_split_checks` (the
same name is the rule id), so the split function and `check_plan` can never disagree.

Sources: `TransformerConfig.__post_init__`, `PipelineParallelLayerLayout` and
`validate_args` of Megatron-LM (megatron-facts.md §8.2-8.3). The even split's own rules
(`layers_divisible_by_pp`, `layers_per_stage_divisible_by_vpp`) are in `specs.rules`.
"""

from __future__ import annotations

from collections.abc import Callable

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.pipeline_split_checks import SPLIT_CHECKS
from specs.plan import ParallelPlan
from specs.rules_base import Rule, rule


def _as_rule(check: Callable[[ModelSpec, ParallelPlan], str | None]) -> Rule:
    """The rule of a split check: same name (the id), same docstring."""

    def body(
        model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
    ) -> str | None:
        return check(model, plan)

    body.__name__ = body.__qualname__ = check.__name__
    body.__doc__ = check.__doc__
    return rule(body)


PIPELINE_RULES: tuple[Rule, ...] = tuple(_as_rule(check) for check in SPLIT_CHECKS)
"""One rule per `specs.pipeline_split_checks.SPLIT_CHECKS` entry, in the same order."""
