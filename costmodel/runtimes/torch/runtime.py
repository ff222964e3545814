"""`TorchRuntime`: the ``torch`` runtime behind `costmodel.runtime.RuntimeModel`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from costmodel.collectives import p2p_time_s, pipeline_send_bytes
from costmodel.compute import activation_dtype, gemm_dtype
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.execution_rules import Runtime
from costmodel.memory import StageMemory
from costmodel.passes import ChunkCost, StageTail, comm_groups
from costmodel.pipeline_sim import TimedAction
from costmodel.runtime import Calibration, ChunkGrid
from costmodel.runtimes.torch.memory import executor_memory_per_stage
from costmodel.runtimes.torch.pricing import executor_chunk_costs, executor_stage_tail
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.screen import simulated_screen
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.executor_refusals import executor_model_refusal
from specs.finetune import executor_lora_refusal
from specs.job import TrainingJob
from specs.kv_sharding import executor_kv_refusal
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_savers import executor_saver_refusal


def kernel_view(profile: HardwareProfile, job: TrainingJob) -> HardwareProfile:
    """``profile`` as the executor's operator lists read it: they price every GEMM and the
    attention kernel at the profile's fp32 rates (`costmodel.runtimes.torch.ops`), which is
    what the executor runs on a CPU. Under autocast on a GPU (`executor.precision`) the
    GEMMs run in the job's GEMM dtype and attention in its activation dtype
    (`costmodel.compute.gemm_dtype`, `activation_dtype`), so their curves and peak take the
    fp32 entries' place; element sizes stay fp32 (parameters, gradients and the
    element-wise operators the lists count)."""
    gemm, attention = gemm_dtype(job.precision), activation_dtype(job.precision)
    if gemm == "fp32":
        return profile
    curves = dict(profile.compute.gemm_efficiency)
    curves["fp32"] = curves[gemm]
    peak = dict(profile.device.peak_tflops)
    peak["fp32"] = peak[gemm]
    kept = tuple(a for a in profile.compute.attention if a.dtype != "fp32")
    relabelled = tuple(replace(a, dtype="fp32") for a in kept if a.dtype == attention)
    compute = replace(profile.compute, gemm_efficiency=curves, attention=kept + relabelled)
    return replace(profile, device=replace(profile.device, peak_tflops=peak), compute=compute)


TORCH_NVFP4_RULE = "nvfp4_needs_megatron_runtime"
"""Rule id of the torch runtime's refusal of nvfp4 jobs (`TorchRuntime.executed_job`)."""
TORCH_PACKED_RULE = "packed_sequences_need_megatron_runtime"
"""Rule id of the torch runtime's refusal of packed sequences (`TorchRuntime.executed_job`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TorchRuntime:
    """paraplan's executor (`executor/`); the Megatron conventions of ``options`` are not
    consulted."""

    options: ExecutionOptions = TORCH_OPTIONS
    """The options it was chosen by (``runtime`` ``torch``)."""

    @property
    def name(self) -> Runtime:
        """``torch``."""
        return "torch"

    @property
    def calibration(self) -> Calibration:
        """Backward split, time scale and layer-collective scale (`reports.calibrate_time`)."""
        return "time_scale"

    def priced_profile(self, profile: HardwareProfile) -> HardwareProfile:
        """The profile as measured: the executor runs the BLAS the profile timed."""
        return profile

    def executed_job(self, job: TrainingJob, profile: HardwareProfile) -> TrainingJob:
        """fp32 on a CPU whatever the job says (`executor.precision`: bf16 matmuls are slow
        on CPUs and fp8 needs CUDA), so a CPU profile's bf16 curves never price a run; the
        job's precision on a GPU. `SpecError` for an optimizer other than Adam: the executor
        steps AdamW only; for a LoRA job (`specs.finetune.executor_lora_refusal`); for packed
        sequences (`TrainingJob.packed_document_tokens`)."""
        lora_refusal = executor_lora_refusal(job.lora)
        if lora_refusal is not None:
            raise SpecError(lora_refusal)
        if job.optimizer != "adam":
            raise SpecError(
                f"optimizer ({job.optimizer}) needs the megatron runtime: paraplan's executor "
                "(the torch runtime) steps AdamW only; use --runtime megatron, or --optimizer "
                "adam"
            )
        if job.packed_document_tokens is not None:
            raise SpecError(
                f"[{TORCH_PACKED_RULE}] packed sequences (packed_document_tokens "
                f"{job.packed_document_tokens}) need the megatron runtime: paraplan's executor "
                "(the torch runtime) trains unpacked sequences only; use --runtime megatron, or "
                "drop --packed-doc-len"
            )
        if job.precision == "nvfp4":
            raise SpecError(
                f"[{TORCH_NVFP4_RULE}] precision nvfp4 needs the megatron runtime: paraplan's "
                f"executor (the torch runtime) runs bf16, fp8 and fp32 only, got precision "
                f"nvfp4 on {profile.name}: use --runtime megatron, or --precision fp8"
            )
        if profile.device.kind == "cpu" and job.precision != "fp32":
            return replace(job, precision="fp32")
        return job

    def chunk_costs(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
    ) -> ChunkGrid:
        """`costmodel.runtimes.torch.pricing.executor_chunk_costs` on the `kernel_view` of
        the profile; SpecError for a model or memory savers the executor does not run
        (`_refuse`)."""
        _refuse(model, plan)
        groups = comm_groups(placements)
        view = kernel_view(profile, job)
        return executor_chunk_costs(model, job, plan, view, groups, placements)

    def send_s(
        self,
        model: ModelSpec,
        job: TrainingJob,
        plan: ParallelPlan,
        profile: HardwareProfile,
        placements: PlanPlacements,
    ) -> tuple[float, ...]:
        """The whole activation over each hop (`costmodel.collectives.pipeline_send_bytes`)
        plus the host excess of a pipelining send/receive pair over the profile's fit
        (`costmodel.runtimes.torch.host_rates.HostRates.excess_s`)."""
        if plan.pp == 1:
            return (0.0,)
        size = pipeline_send_bytes(model, job, plan)
        excess = host_rates(profile).excess_s("send_recv", 2)
        return tuple(
            p2p_time_s(profile, size, intra=intra) + excess for intra in placements.pp_hop_intra
        )

    def blocking_sends(self, plan: ParallelPlan) -> bool:
        """Always with pp > 1: torch pipelining waits every send with the next receive."""
        return plan.pp > 1

    def blocking_flush_sends(self, plan: ParallelPlan) -> bool:
        """Never needed: every send blocks already (`blocking_sends`)."""
        return False

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
        """`costmodel.runtimes.torch.pricing.executor_stage_tail`."""
        return executor_stage_tail(model, plan, profile, placements, stage, row)

    def memory(
        self, model: ModelSpec, job: TrainingJob, plan: ParallelPlan
    ) -> tuple[StageMemory, ...]:
        """`costmodel.runtimes.torch.memory.executor_memory_per_stage`; SpecError as
        `chunk_costs`."""
        _refuse(model, plan)
        return executor_memory_per_stage(model, job, plan)

    def screen(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        job: TrainingJob,
        profile: HardwareProfile,
        rows: pd.DataFrame,
    ) -> pd.DataFrame:
        """`costmodel.runtimes.torch.screen.simulated_screen`: every distinct plan simulated;
        SpecError for a model the executor does not build (`_refuse_model`)."""
        _refuse_model(model)
        return simulated_screen(model, cluster, job, profile, rows, self)


def _refuse_model(model: ModelSpec) -> None:
    """SpecError for a model paraplan's executor does not build
    (`specs.executor_refusals.executor_model_refusal`, the executor's own checks)."""
    refusal = executor_model_refusal(model)
    if refusal is not None:
        raise SpecError(refusal)


def _refuse(model: ModelSpec, plan: ParallelPlan) -> None:
    """SpecError for a model (`_refuse_model`), a memory saver
    (`specs.rules_savers.executor_saver_refusal`) or a tp above the key/value heads
    (`specs.kv_sharding.executor_kv_refusal`) paraplan's executor does not run."""
    _refuse_model(model)
    refusal = executor_saver_refusal(plan) or executor_kv_refusal(
        model, plan.tp, "the torch runtime (paraplan's executor)"
    )
    if refusal is not None:
        raise SpecError(refusal)
