"""`RuntimeModel`: what a runtime model provides to the shared core.

A runtime is the software that runs a plan's training step: ``megatron`` (Megatron-core
with Transformer Engine, `costmodel.runtimes.megatron`) or ``torch`` (paraplan's executor,
`costmodel.runtimes.torch`). The core (FLOPs, parameter and activation counting, compute
and collective pricing, schedules, the event loop `costmodel.iteration`, the estimate and
the timeline) is the same for both; a runtime supplies:

- how it sees the profile and the job (`priced_profile`, `executed_job`);
- the per-microbatch cost of every model chunk and the pipeline sends (`chunk_costs`,
  `send_s`, `blocking_sends`, `blocking_flush_sends`);
- the work of a stage after its last backward (`stage_tail`);
- the memory of every stage (`memory`);
- the planner's fast screen over many plans (`screen`);
- the calibration method that fits it to measured runs (`calibration`).

`costmodel.runtimes.registry.runtime_model` returns the runtime of an `ExecutionOptions`.
"""

from __future__ import annotations

from typing import Literal, Protocol

import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_rules import Runtime
from costmodel.memory import StageMemory
from costmodel.passes import ChunkCost, StageTail
from costmodel.pipeline_sim import TimedAction
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

ChunkGrid = tuple[tuple[ChunkCost, ...], ...]
"""Per pipeline stage, per model chunk of that stage: one microbatch's costs."""

Calibration = Literal["kernel_factors", "time_scale"]
"""How `reports.calibrate` fits a runtime: ``kernel_factors`` refits the profile's
collectives and five kernel-efficiency factors (`reports.calibrate_factors`);
``time_scale`` fits a backward split, one time scale and a layer-collective scale
(`reports.calibrate_time`, `reports.calibrate_layers`)."""


class RuntimeModel(Protocol):
    """The runtime-specific part of the cost model (module docstring)."""

    @property
    def name(self) -> Runtime:
        """The runtime's name (`costmodel.execution_rules.RUNTIMES`)."""
        ...

    @property
    def options(self) -> ExecutionOptions:
        """The options the runtime was built from."""
        ...

    @property
    def calibration(self) -> Calibration:
        """The calibration method that fits this runtime (`Calibration`)."""
        ...

    def priced_profile(self, profile: HardwareProfile) -> HardwareProfile:
        """``profile`` as the runtime's kernels see it."""
        ...

    def executed_job(self, job: TrainingJob, profile: HardwareProfile) -> TrainingJob:
        """``job`` as the runtime computes it on ``profile``'s device."""
        ...

    def chunk_costs(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
    ) -> ChunkGrid:
        """Every chunk's forward, backward and recompute for one microbatch."""
        ...

    def send_s(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
    ) -> tuple[float, ...]:
        """Seconds of one microbatch's activation send across each stage boundary, the
        last entry from the last stage back to the first."""
        ...

    def blocking_sends(self, plan: ParallelPlan) -> bool:
        """True when a pipeline send extends the sending action."""
        ...

    def blocking_flush_sends(self, plan: ParallelPlan) -> bool:
        """True when, with asynchronous sends (`blocking_sends` False), the sends of an
        interleaved schedule's warmup forwards and cooldown backwards still hold the
        sending stage until they complete."""
        ...

    def stage_tail(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
        stage: int,
        chunks: tuple[ChunkCost, ...],
        row: tuple[TimedAction, ...],
    ) -> StageTail:
        """The stage's work after its last backward (``row``: its timed actions)."""
        ...

    def memory(
        self, model: ModelSpec, job: TrainingJob, plan: ParallelPlan
    ) -> tuple[StageMemory, ...]:
        """Peak memory of one rank of every stage, stage 0 first."""
        ...

    def screen(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        job: TrainingJob,
        profile: HardwareProfile,
        rows: pd.DataFrame,
    ) -> pd.DataFrame:
        """``rows`` (normalized plan rows, `costmodel.plan_frame`) with the screen's metric
        columns (`costmodel.screen.screen_plans`)."""
        ...
