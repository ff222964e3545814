"""`PlanBundle`: a plan together with the model, cluster and job it was made for.

This is the `plan.json` that `paraplan plan --out` writes and `paraplan execute` and
`paraplan export` read: everything a run needs, in one file, with the execution options the
plan was priced with (`PlanBundle.execution`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    execution: dict[str, Any] = field(default_factory=dict)
    """The execution options the plan was priced with: the fields of
    `costmodel.execution.ExecutionOptions` that differ from Megatron-LM's defaults
    (``DEFAULT_OPTIONS``), by field name, as JSON values (`costmodel.execution_record`
    writes and reads them; this package does not import the cost model). Empty: the
    defaults, as in plan files written before the key existed."""
