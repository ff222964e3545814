"""The shared vocabulary of paraplan: model, cluster, job, plan and timeline specs.

Pure Python, no torch and no other paraplan package: every other package imports these.
Specs are frozen, keyword-only dataclasses with a lossless JSON round trip
(`specs.serde`). Cross-object validation is `specs.rules.check_plan`.
"""

from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.timeline import Timeline, TimelineEvent

__all__ = [
    "ClusterSpec",
    "ModelSpec",
    "ParallelPlan",
    "PlanBundle",
    "SpecError",
    "Timeline",
    "TimelineEvent",
    "TrainingJob",
]
