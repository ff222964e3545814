"""The time of the 16-bit inputs a layer saves depending on its recompute or offload
modules (`SavedInputTerms`): the linears `costmodel.saved_inputs` gates on
``ParallelPlan.recompute_modules`` and ``offload_modules`` (the shared expert's FC1 unless
``shared_experts`` is recomputed, the routed experts' FC2 under ``moe_act`` and FC1 under
``expert_fc1`` offloading, MLA's down projections under ``layernorm``).
`layer_costs.layer_passes` prices them once per layer, beside the passes every recompute
set shares, and `layer_costs.layer_cost_from_passes` adds those the plan's
modules turn on (`saved_input_s`): forward and backward compute, the backward in its
dgrad part like the other quantizations, after the MoE all-to-all overlap and the host
floor. The attention output projection's saving depends on the recipe alone and is in the
attention passes (`pair_quantization.fp8_pair_s`, `requant_costs.mla_requant_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute import LOW_PRECISION_GEMM_DTYPES
from costmodel.execution import ExecutionOptions
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_shape import LayerShape
from costmodel.runtimes.megatron.mlp_costs import mlp_block
from costmodel.runtimes.megatron.moe_costs import expert_quantize_s
from costmodel.runtimes.megatron.requant_costs import mla_requant_s
from costmodel.saved_inputs import (
    expert_fc1_saves_input,
    expert_fc2_saves_input,
    mla_down_projections_saving_input,
    shared_fc1_saves_input,
)
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class SavedInputTerms:
    """Seconds one layer's recompute-dependent saved inputs change its passes by, for one
    microbatch on one rank (module docstring); zeros where the layer, the job's precision
    or recipe has no such input."""

    shared_fc1: tuple[float, float] = (0.0, 0.0)
    """(forward, backward) change of the shared expert when its FC1 saves its input: one
    quantized copy less in the forward, the second cast in the backward
    (`pair_quantization.fp8_pair_s` ``column_saves_input``)."""
    expert_fc2: tuple[float, float] = (0.0, 0.0)
    """(forward, backward) change of the routed experts when FC2 saves its input
    (`moe_experts.expert_fp8_quantize_s` ``fc2_saves_input``)."""
    expert_fc1: tuple[float, float] = (0.0, 0.0)
    """The same when FC1 saves its input rows (``fc1_saves_input``)."""
    down_projection_s: float = 0.0
    """Backward seconds of one MLA down projection's second cast
    (`requant_costs.mla_requant_s`)."""


def _delta(saved: tuple[float, float], plain: tuple[float, float]) -> tuple[float, float]:
    return saved[0] - plain[0], saved[1] - plain[1]


def saved_input_terms(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    x: LayerShape,
    comm: CommGroups,
    options: ExecutionOptions,
    kind: LayerKind,
) -> SavedInputTerms:
    """`SavedInputTerms` of a layer of ``kind`` on the shape ``x``; none of it depends on
    ``plan.recompute_modules``. A LoRA job's frozen weights save nothing for a wgrad GEMM."""
    if x.dtype not in LOW_PRECISION_GEMM_DTYPES or job.lora is not None:
        return SavedInputTerms()
    down = 0.0
    if kind.mixer == "attention":
        down = mla_requant_s(
            model,
            profile,
            x,
            options.fp8_recipe,
            down_projection=True,
            fused_rht=options.nvfp4_fused_rht_cast,
        )
    if not kind.is_moe:
        return SavedInputTerms(down_projection_s=down)
    shared = model.moe_shared_expert_size
    plain = mlp_block(model, plan, profile, x, comm, shared, options)
    saved = mlp_block(model, plan, profile, x, comm, shared, options, saves_input=True)
    experts = [
        expert_quantize_s(
            model, plan, profile, x.norm_tokens, x.elem, x.dtype, options, fc2_saves_input=s
        )
        for s in (False, True)
    ]
    fc1 = expert_quantize_s(
        model, plan, profile, x.norm_tokens, x.elem, x.dtype, options, fc1_saves_input=True
    )
    return SavedInputTerms(
        shared_fc1=_delta(
            (saved[0].compute_s, saved[1].compute_s), (plain[0].compute_s, plain[1].compute_s)
        ),
        expert_fc2=_delta(experts[1], experts[0]),
        expert_fc1=_delta(fc1, experts[0]),
        down_projection_s=down,
    )


def saved_input_s(
    terms: SavedInputTerms,
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    options: ExecutionOptions,
) -> tuple[float, float]:
    """(forward, backward) seconds the plan's recompute and offload modules turn on of
    ``terms`` (`costmodel.saved_inputs` gates)."""
    forward, backward = 0.0, 0.0
    if expert_fc1_saves_input(plan, job.precision, options.fp8_recipe):
        forward, backward = forward + terms.expert_fc1[0], backward + terms.expert_fc1[1]
    if shared_fc1_saves_input(model, plan):
        forward, backward = forward + terms.shared_fc1[0], backward + terms.shared_fc1[1]
    if expert_fc2_saves_input(plan, fused_grouped_mlp=options.moe_fused_grouped_mlp):
        forward, backward = forward + terms.expert_fc2[0], backward + terms.expert_fc2[1]
    backward += mla_down_projections_saving_input(model, plan) * terms.down_projection_s
    return forward, backward
