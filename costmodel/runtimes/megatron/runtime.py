"""`MegatronRuntime`: the ``megatron`` runtime behind `costmodel.runtime.RuntimeModel`."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from costmodel.attention_core import check_packed_attention
from costmodel.bf16_layers import bf16_layers
from costmodel.compute import check_precision_device
from costmodel.execution import ExecutionOptions
from costmodel.execution_derived import (
    fp8_attention_recipe,
    fp8_weight_storage,
    optimizer_precision,
)
from costmodel.execution_presets import DEFAULT_OPTIONS, framework_profile
from costmodel.execution_rules import Runtime
from costmodel.fp8_attention import check_fp8_attention
from costmodel.memory import StageMemory, memory_per_stage
from costmodel.passes import ChunkCost, StageTail, comm_groups
from costmodel.pipeline_sim import TimedAction
from costmodel.runtime import Calibration, ChunkGrid
from costmodel.runtimes.megatron.pricing import (
    blocking_flush_sends,
    blocking_sends,
    chunk_costs,
    pipeline_send_s,
)
from costmodel.runtimes.megatron.screen import closed_form_screen
from costmodel.runtimes.megatron.stage_tail import stage_tail
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class MegatronRuntime:
    """Megatron-core with Transformer Engine, under the conventions of ``options``
    (`costmodel.execution.ExecutionOptions`: attention kernel, fusions, pipeline sends)."""

    options: ExecutionOptions = DEFAULT_OPTIONS
    """Kernel and communication conventions."""

    @property
    def name(self) -> Runtime:
        """``megatron``."""
        return "megatron"

    @property
    def calibration(self) -> Calibration:
        """Collective fits and kernel-efficiency factors (`reports.calibrate_factors`)."""
        return "kernel_factors"

    def priced_profile(self, profile: HardwareProfile) -> HardwareProfile:
        """`costmodel.execution_presets.framework_profile`: the GEMM curves of the BLAS it links."""
        return framework_profile(profile, self.options)

    def executed_job(self, job: TrainingJob, profile: HardwareProfile) -> TrainingJob:
        """The job unchanged: Megatron computes in the job's precision. `SpecError` for an
        nvfp4 job on a device without FP4 tensor cores
        (`costmodel.compute.check_precision_device`) and for FP8 attention the job, recipe
        or profile cannot run (`costmodel.fp8_attention.check_fp8_attention`), and for packed
        sequences on the materialized kernel (`costmodel.attention_core.check_packed_attention`)."""
        check_precision_device(job.precision, profile)
        check_fp8_attention(job.precision, fp8_attention_recipe(self.options), profile)
        check_packed_attention(job.packed_document_tokens, self.options.attention)
        return job

    def chunk_costs(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
    ) -> ChunkGrid:
        """`costmodel.runtimes.megatron.pricing.chunk_costs` over the plan's
        `costmodel.passes.comm_groups`."""
        return chunk_costs(model, job, plan, profile, comm_groups(placements), self.options)

    def send_s(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
    ) -> tuple[float, ...]:
        """`costmodel.runtimes.megatron.pricing.pipeline_send_s`."""
        return pipeline_send_s(model, job, plan, profile, placements, self.options)

    def blocking_sends(self, plan: ParallelPlan) -> bool:
        """Blocking under 1F1B, and interleaved without `ExecutionOptions.overlap_p2p`."""
        return blocking_sends(plan, self.options)

    def blocking_flush_sends(self, plan: ParallelPlan) -> bool:
        """`costmodel.runtimes.megatron.pricing.blocking_flush_sends`: interleaved warmup and
        cooldown sends block even with `ExecutionOptions.overlap_p2p`."""
        return blocking_flush_sends(plan, self.options)

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
        """`costmodel.runtimes.megatron.stage_tail.stage_tail`."""
        return stage_tail(model, job, plan, profile, placements, stage, chunks, row, self.options)

    def memory(
        self, model: ModelSpec, job: TrainingJob, plan: ParallelPlan
    ) -> tuple[StageMemory, ...]:
        """`costmodel.memory.memory_per_stage` with the options' attention kernel, hidden
        dropout, main-gradient element size, pipeline-output deallocation, DDP gradient
        copy, cross-entropy implementation, allocator segments and fragmentation, FP8
        weight storage, the optimizer step's gradient copy, Adam's state dtypes, the
        optimizer state offloaded to the host, the previous iteration's gradients held
        by local DDP, FP8 attention's saved tensors, the layers kept in bf16
        (`costmodel.bf16_layers.bf16_layers`), the engine of sharded weights
        (`ExecutionOptions.param_gather_engine`) and the CUDA graph scopes' static input
        copies (`costmodel.cuda_graph_memory.graph_input_copy_bytes`)."""
        return memory_per_stage(
            model,
            job,
            plan,
            attention=self.options.attention,
            dropout=self.options.hidden_dropout,
            main_grad_bytes=self.options.main_grad_bytes,
            keep_outputs=not self.options.deallocate_pipeline_outputs,
            ddp_gradient_copy=self.options.ddp_gradient_copy,
            cross_entropy=self.options.cross_entropy_fusion,
            expandable_segments=self.options.expandable_segments,
            fp8_weights=fp8_weight_storage(self.options),
            fragmentation=self.options.allocator_fragmentation,
            step_gradient_copy=self.options.step_gradient_copy,
            optimizer=optimizer_precision(self.options),
            optimizer_offload_fraction=self.options.optimizer_cpu_offload_fraction,
            stale_main_grad=self.options.stale_main_grad,
            fp8_attention=self.options.fp8_attention,
            bf16_layers=bf16_layers(model, job, self.options),
            zero3_engine=self.options.param_gather_engine == "deepspeed_zero3",
            cuda_graph_scopes=self.options.cuda_graph_scopes,
        )

    def screen(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        job: TrainingJob,
        profile: HardwareProfile,
        rows: pd.DataFrame,
    ) -> pd.DataFrame:
        """`costmodel.runtimes.megatron.screen.closed_form_screen`; `SpecError` as
        `executed_job` for a precision or FP8 attention the device cannot run, and for packed
        sequences on the materialized kernel."""
        check_precision_device(job.precision, profile)
        check_fp8_attention(job.precision, fp8_attention_recipe(self.options), profile)
        check_packed_attention(job.packed_document_tokens, self.options.attention)
        if self.options.param_gather_engine != "megatron_fsdp":
            raise SpecError(
                f"param_gather_engine {self.options.param_gather_engine!r}: the closed-form "
                "screen prices Megatron-FSDP's gathers only; price the plan with "
                "costmodel.estimate.estimate_plan, or search with "
                "param_gather_engine='megatron_fsdp'"
            )
        return closed_form_screen(model, cluster, job, profile, rows, self.options)
