"""`Estimate`: the detailed prediction for one plan, and its JSON form.

`estimate_plan` runs the event loop (`costmodel.iteration`) for time and the runtime's
memory model for memory (`costmodel.runtime.RuntimeModel`, chosen by
`ExecutionOptions.runtime`), and reports throughput in two FLOP conventions
(DESIGN.md): MFU counts Megatron-LM's model FLOPs (`costmodel.flops`, recompute not
counted), HFU adds the recomputed forwards. Both divide by the dense peak of the job's GEMM
dtype (bf16, fp8, fp4 or fp32) times the number of GPUs; `mfu_over_peaks` also gives MFU
over the dense bf16 peak, the convention of torchtitan's and Megatron-Bridge's published
figures, which differs for fp8, nvfp4 and fp32 jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.compute import gemm_dtype
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from costmodel.hardware_flops import (
    hardware_flops_per_iteration,
)
from costmodel.iteration import Breakdown, simulate_iteration
from costmodel.iteration_flops import job_model_flops_per_iteration
from costmodel.memory import StageMemory
from costmodel.memory_allowances import GiB
from costmodel.predicted_timeline import build_timeline
from costmodel.runtimes.registry import runtime_model
from costmodel.scale_up import RankPacking
from costmodel.schedules import plan_split
from profiles.lookup import peak_flops
from profiles.schema import HardwareProfile
from specs.cluster import ClusterSpec
from specs.finetune import LoraSpec
from specs.formats import BF16_PEAK_DTYPES
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules import require_valid_plan
from specs.serde import to_dict
from specs.timeline import Timeline

MEMORY_PARTS = (
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "recompute_working",
    "embedding_activations",
    "output_activations",
    "comm_buffers",
    "framework",
    "optimizer_step",
    "cuda_graph",
)
"""Memory parts of a stage, in report order (`StageMemory` fields without ``_bytes``).
``optimizer_step`` is nonzero only where the optimizer step sets the stage's peak
(`StageMemory.optimizer_step_bytes`), ``cuda_graph`` only under per-layer CUDA graphs at
pp > 1 (`StageMemory.cuda_graph_bytes`); `estimate_to_json` leaves either out where it is
0."""

JSON_KEYS = (
    "runtime",
    "iteration_time_s",
    "tokens_per_s",
    "model_tflops_per_gpu",
    "mfu",
    "mfu_peak_dtype",
    "mfu_bf16",
    "hfu",
    "flops_per_iteration",
    "peak_memory_gib",
    "fits",
    "memory",
    "breakdown",
    "stages",
)
"""Keys of `estimate_to_json`, in order; a LoRA job's estimate adds ``lora`` (its
`specs.finetune.LoraSpec` fields) after ``runtime``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StageTime:
    """The simulated work of one pipeline stage (one rank of it)."""

    pp_rank: int
    """Pipeline stage."""
    num_layers: int
    """Transformer layers it holds over its chunks (`specs.pipeline_split`)."""
    forward_s: float
    """Forward seconds of one microbatch through all its chunks."""
    backward_s: float
    """Backward seconds (with recompute) of one microbatch through all its chunks."""
    pipeline_end_s: float
    """End of its last backward in the iteration."""
    grads_done_s: float
    """End of its gradient reduction (its optimizer may start)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """The predicted iteration of one plan on one cluster."""

    runtime: str
    """The runtime the plan was priced for (`costmodel.execution_rules.RUNTIMES`)."""
    iteration_time_s: float
    """Seconds per training iteration."""
    breakdown: Breakdown
    """Per-phase seconds on the critical stage; they sum to iteration_time_s."""
    tokens_per_s: float
    """Global batch x sequence length / iteration time, over the whole job."""
    model_tflops_per_gpu: float
    """Model FLOPs (MFU convention) per second per GPU, in TFLOP/s."""
    mfu: float
    """Model FLOPs utilisation: model FLOP/s per GPU / peak FLOP/s of the GEMM dtype."""
    mfu_peak_dtype: str
    """The GEMM dtype whose dense peak mfu and hfu divide by: bf16, fp16, fp8, fp4 or fp32."""
    mfu_bf16: float | None
    """Model FLOP/s per GPU / the dense bf16 peak: equal to mfu for a bf16 or fp16 job; None
    when the profile has no bf16 peak."""
    hfu: float
    """Hardware FLOPs utilisation: like mfu with recomputed forwards counted."""
    flops_per_iteration: float
    """Model FLOPs of one iteration over the whole job (Megatron-LM convention)."""
    hardware_flops_per_iteration: float
    """Model FLOPs plus recompute, over the whole job."""
    memory: tuple[StageMemory, ...]
    """Peak memory of one rank of every pipeline stage, stage 0 first."""
    peak_memory_bytes: float
    """Largest per-rank total over the stages."""
    device_memory_bytes: float
    """Memory of one device (the profile's memory_gib)."""
    critical_stage: int
    """Pipeline stage the breakdown is taken on."""
    stage_times: tuple[StageTime, ...] = ()
    """Simulated work of every pipeline stage, stage 0 first."""
    lora: LoraSpec | None = None
    """The job's LoRA adapters when it fine-tunes them on a frozen model, else None."""

    @property
    def peak_memory_gib(self) -> float:
        """Peak memory in GiB (2**30 bytes)."""
        return self.peak_memory_bytes / GiB

    @property
    def fits(self) -> bool:
        """True when the peak stage fits in device memory."""
        return self.peak_memory_bytes <= self.device_memory_bytes


def mfu_over_peaks(
    model_flops_per_s_per_gpu: float, profile: HardwareProfile, dtype: str
) -> tuple[float, float | None]:
    """MFU of ``model_flops_per_s_per_gpu`` over the dense peak of GEMM dtype ``dtype``
    (`profiles.lookup.peak_flops`) and over the dense bf16 peak (the same figure for bf16
    and fp16; None when the profile has no bf16 peak). The second is torchtitan's
    denominator (``get_peak_flops``, `torchtitan/tools/utils.py`: the bf16 tensor-core
    peak of the device whatever the training dtype), over which published MFU of fp8 runs
    is commonly quoted."""
    mfu = model_flops_per_s_per_gpu / peak_flops(profile, dtype)
    if dtype in BF16_PEAK_DTYPES:
        return mfu, mfu
    if "bf16" not in profile.device.peak_tflops:
        return mfu, None
    return mfu, model_flops_per_s_per_gpu / peak_flops(profile, "bf16")


def simulate_plan(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    options: ExecutionOptions = DEFAULT_OPTIONS,
    timeline: bool = True,
) -> tuple[Estimate, Timeline | None]:
    """The `Estimate` and (with ``timeline``) the predicted `Timeline` of ``plan``.

    Raises `SpecError` listing the violated rules when the plan is invalid
    (`specs.rules.require_valid_plan`). ``options`` names the runtime and how it runs the
    plan (attention kernel, gradient-accumulation fusion; `costmodel.execution`), Megatron-LM's
    current defaults unless given. MFU and HFU divide by the peak of the dtype the runtime
    computes in (fp32 for the executor on a CPU). Fields of ``options`` left to the device
    are resolved for ``profile`` (`costmodel.execution_presets.device_options`).
    """
    require_valid_plan(model, cluster, job, plan)
    runtime = runtime_model(device_options(options, profile))
    sim = simulate_iteration(
        model,
        job,
        plan,
        profile,
        runtime=runtime,
        packing=RankPacking.of(cluster),
    )
    stages = runtime.memory(model, job, plan)
    model_flops = job_model_flops_per_iteration(model, job)
    hardware_flops = hardware_flops_per_iteration(model, job, plan)
    seconds = sim.iteration_time_s
    gpus = cluster.num_gpus
    dtype = gemm_dtype(runtime.executed_job(job, profile).precision)
    peak = peak_flops(profile, dtype)
    mfu, mfu_bf16 = mfu_over_peaks(model_flops / seconds / gpus, profile, dtype)
    estimate = Estimate(
        runtime=options.runtime,
        iteration_time_s=seconds,
        breakdown=sim.breakdown,
        tokens_per_s=job.tokens_per_iteration / seconds,
        model_tflops_per_gpu=model_flops / seconds / gpus / 1e12,
        mfu=mfu,
        mfu_peak_dtype=dtype,
        mfu_bf16=mfu_bf16,
        hfu=hardware_flops / seconds / gpus / peak,
        flops_per_iteration=model_flops,
        hardware_flops_per_iteration=hardware_flops,
        memory=stages,
        peak_memory_bytes=max(s.total_bytes for s in stages),
        device_memory_bytes=profile.device.memory_gib * GiB,
        critical_stage=sim.critical_stage,
        stage_times=tuple(
            StageTime(
                pp_rank=stage,
                num_layers=plan_split(model, plan).rank_num_layers(stage),
                forward_s=sum(c.forward.duration_s for c in sim.chunks[stage]),
                backward_s=sum(c.backward_with_recompute.duration_s for c in sim.chunks[stage]),
                pipeline_end_s=sim.tails[stage].pipeline_end_s,
                grads_done_s=sim.tails[stage].grads_done_s,
            )
            for stage in range(plan.pp)
        ),
        lora=job.lora,
    )
    return estimate, build_timeline(sim, plan) if timeline else None


def estimate_plan(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    *,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """The detailed `Estimate` of ``plan`` (event loop; no timeline built); ``options``
    as in `simulate_plan`.

    Raises `SpecError` when the plan breaks a rule of `specs.rules.check_plan`.
    """
    estimate, _ = simulate_plan(model, cluster, job, plan, profile, options=options, timeline=False)
    return estimate


def stage_memory_parts_gib(stage: StageMemory) -> dict[str, float]:
    """A stage's memory parts in GiB, keyed by `MEMORY_PARTS`."""
    return {name: getattr(stage, f"{name}_bytes") / GiB for name in MEMORY_PARTS}


def estimate_to_json(est: Estimate) -> dict[str, Any]:
    """JSON-ready dict with exactly the keys of `JSON_KEYS` (and ``lora`` for a LoRA job):
    memory is a list per stage of {"stage", "total_gib", "parts": {part: GiB}} (the parts
    sum to the total; ``optimizer_step`` and ``cuda_graph`` only where nonzero) and
    breakdown maps each phase (without ``_s``) to seconds."""
    lora = {} if est.lora is None else {"lora": to_dict(est.lora)}
    return {
        "runtime": est.runtime,
        **lora,
        "iteration_time_s": est.iteration_time_s,
        "tokens_per_s": est.tokens_per_s,
        "model_tflops_per_gpu": est.model_tflops_per_gpu,
        "mfu": est.mfu,
        "mfu_peak_dtype": est.mfu_peak_dtype,
        "mfu_bf16": est.mfu_bf16,
        "hfu": est.hfu,
        "flops_per_iteration": est.flops_per_iteration,
        "peak_memory_gib": est.peak_memory_gib,
        "fits": est.fits,
        "memory": [
            {
                "stage": stage.pp_rank,
                "total_gib": stage.total_bytes / GiB,
                "parts": {
                    name: gib
                    for name, gib in stage_memory_parts_gib(stage).items()
                    if gib or name not in ("optimizer_step", "cuda_graph")
                },
            }
            for stage in est.memory
        ],
        "breakdown": est.breakdown.as_dict(),
        "stages": [
            {
                "stage": t.pp_rank,
                "num_layers": t.num_layers,
                "forward_s": t.forward_s,
                "backward_s": t.backward_s,
                "pipeline_end_s": t.pipeline_end_s,
                "grads_done_s": t.grads_done_s,
            }
            for t in est.stage_times
        ],
    }
