"""The time assumptions `paraplan estimate` and `paraplan plan` print: the figures of the
megatron runtime that are fitted on published runs rather than measured on the device
(`costmodel.fitted_rates`), the value in force for the profile and where it comes from."""

from __future__ import annotations

from costmodel.cuda_graph_rules import WHOLE_STEP
from costmodel.execution import ExecutionOptions
from costmodel.fitted_rates import (
    FP4_GEMM_RATE_FACTORS,
    FP8_GEMM_RATE_FACTORS,
    MOE_FIT_GENERATIONS,
    MOE_TOKEN_DEVICE_HBM_GBPS,
    SUSTAINED_GEMM_RATE_FACTORS,
    fp4_gemm_rate_factor,
    fp8_gemm_rate_factor,
    sustained_gemm_rate_factor,
    token_device_s,
)
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

HOST_DRIVEN_OVERLAP_LINE = (
    "  MoE all-to-all overlap (--overlap-moe-expert-parallel-comm) without a full-iteration "
    "CUDA graph: priced as the merged 1F1B step hides the exchange; the published runs that "
    "drive it from the host gain less (8 dev-set rows predicted 5-31% fast, median -9% with "
    "per-layer graphs and -28% without: bench/a2a_overlap.py --rows)"
)
"""The caveat `time_assumptions` adds where the overlap runs with host work in the step."""


def fitted_figures_apply(options: ExecutionOptions, profile: HardwareProfile) -> bool:
    """Whether a prediction rests on the figures fitted on published Megatron runs: the
    megatron runtime on a GPU profile. `time_assumptions` names those figures and
    `paraplan.accuracy` gives the errors of the runs they were fitted on, under this rule."""
    return options.runtime == "megatron" and profile.device.kind == "gpu"


def time_assumptions(
    model: ModelSpec,
    job: TrainingJob,
    options: ExecutionOptions,
    profile: HardwareProfile,
    plan: ParallelPlan | None = None,
) -> list[str]:
    """Lines naming each fitted figure the megatron runtime prices ``job`` with on
    ``profile``: the GEMM rate factor of the job's GEMM dtype and, for a MoE model, the host
    time per launch and the device time per token, each with its source (fitted for the
    profile's generation, shared by the generations without runs of their own, or set by
    the options); and, where the MoE all-to-all overlap acts on ``plan`` (on any plan it
    applies to when ``plan`` is None) without a full-iteration CUDA graph, the published
    evidence that such runs gain less than priced (`HOST_DRIVEN_OVERLAP_LINE`). Empty for
    other runtimes and for a profile that is not a GPU."""
    if not fitted_figures_apply(options, profile):
        return []
    generation = profile.device.generation
    lines = ["time assumes (figures fitted on published Megatron runs, docs/validation.md):"]
    if job.precision == "fp8":
        factor = fp8_gemm_rate_factor(profile, options.fp8_gemm_rate_factor)
        source = _factor_source(options.fp8_gemm_rate_factor, generation, FP8_GEMM_RATE_FACTORS)
        lines.append(f"  FP8 GEMMs at {factor:g} of the profile's rate ({source})")
    elif job.precision == "nvfp4":
        factor = fp4_gemm_rate_factor(profile, options.fp4_gemm_rate_factor)
        source = _factor_source(options.fp4_gemm_rate_factor, generation, FP4_GEMM_RATE_FACTORS)
        lines.append(f"  NVFP4 GEMMs at {factor:g} of the profile's fp4 rate ({source})")
    elif job.precision in ("bf16", "fp16"):
        factor = sustained_gemm_rate_factor(profile, options.sustained_gemm_rate_factor)
        own = options.sustained_gemm_rate_factor
        source = _factor_source(own, generation, SUSTAINED_GEMM_RATE_FACTORS)
        lines.append(f"  16-bit GEMMs at {factor:g} of the profile's rate ({source})")
    if model.num_experts:
        fitted_on = " and ".join(MOE_FIT_GENERATIONS)
        unfitted = "" if generation in MOE_FIT_GENERATIONS else f"; none of {generation}"
        per_token_ns = token_device_s(profile, options.moe_token_device_s) * 1e9
        lines.append(
            f"  MoE layers: {options.moe_host_launch_s * 1e6:g} us of host time per eager "
            f"Python-level launch, {options.moe_expert_launch_s * 1e6:g} us per launch "
            "Transformer Engine issues per local expert from C++, "
            f"and {per_token_ns:.0f} ns of device time per token that no priced "
            f"kernel accounts for ({options.moe_token_device_s * 1e9:g} ns at "
            f"{MOE_TOKEN_DEVICE_HBM_GBPS:,.0f} GB/s of HBM, scaled to the profile's "
            f"{profile.device.hbm_GBps:,.0f}), fitted on {fitted_on} runs{unfitted}"
        )
        # imported here: the runtime's modules are heavy, and the command answers first
        from costmodel.runtimes.megatron.moe_a2a_overlap import a2a_overlap_applies

        applies = plan is None or a2a_overlap_applies(plan, options)
        if options.moe_a2a_overlap and applies and WHOLE_STEP not in options.cuda_graph_scopes:
            lines.append(HOST_DRIVEN_OVERLAP_LINE)
    return lines if len(lines) > 1 else []


def _factor_source(override: float | None, generation: str, by_generation: dict[str, float]) -> str:
    """Where a GEMM rate factor comes from: the options, the generation's own fit, or the
    value shared by the generations without runs of their own."""
    if override is not None:
        return "set by the execution options"
    if generation in by_generation:
        return f"fitted for {generation}"
    return f"the value shared by generations without runs of their own, {generation} among them"
