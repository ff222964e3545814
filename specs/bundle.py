"""`PlanBundle`: a plan together with the model, cluster and job it was made for.

This is the `plan.json` that `paraplan plan --out` writes and `paraplan execute` reads:
everything a run needs, in one file.
"""

from __future__ import annotations

from dataclasses import dataclass

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanBundle:
    """Model, cluster, job and plan of one run."""

    model: ModelSpec
    """The model to train."""
    cluster: ClusterSpec
    """Where it runs."""
    job: TrainingJob
    """Sequence length, batch and precision."""
    plan: ParallelPlan
    """How it is sharded."""
