"""Plan rules for the memory savers Megatron-core states per module: selective recompute of
named modules (`ParallelPlan.recompute_modules`) and CPU activation offloading, layer-level
(`ParallelPlan.cpu_offloading_num_layers`) or fine-grained (`ParallelPlan.offload_modules`).

The checks are Megatron-core's own (`TransformerConfig.__post_init__`,
`megatron/core/transformer/transformer_config.py`): module names that need MLA, MoE or
gated DeltaNet layers, layer-level offloading only without pipelining and without
recompute, and the two offloading forms not together. Each rule follows `specs.rules_base`
conventions.
"""

from __future__ import annotations

from specs.cluster import ClusterSpec
from specs.gdn_checks import has_gdn
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import rule

MOE_RECOMPUTE_MODULES = ("moe_act", "moe", "shared_experts")
"""Recompute modules that exist only in MoE layers."""
MOE_OFFLOAD_MODULES = ("expert_fc1", "moe_act")
"""Offload modules that exist only in MoE layers."""


@rule
def recompute_modules_need_selective(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """recompute_modules applies to selective recompute only (Megatron-core reads
    ``recompute_modules`` under ``recompute_granularity == "selective"``)."""
    if plan.recompute_modules is None or plan.recompute == "selective":
        return None
    return (
        f"recompute_modules ({','.join(plan.recompute_modules)}) applies only to selective "
        f"recompute, got recompute ('{plan.recompute}'): set recompute='selective' or drop "
        "recompute_modules"
    )


def missing_recompute_modules(model: ModelSpec, modules: tuple[str, ...]) -> list[str]:
    """The recompute ``modules`` that ``model`` lacks, each with the reason: ``mla_up_proj``
    needs multi-latent attention, ``moe_act``/``moe``/``shared_experts`` MoE layers
    (``shared_experts`` a shared expert), ``mlp`` dense layers, ``gdn_norm_out`` gated
    DeltaNet layers (Megatron-core raises without a gated DeltaNet attention variant)."""
    wrong = []
    for module in modules:
        if module == "mla_up_proj" and not model.uses_mla:
            wrong.append(f"{module} (no MLA)")
        elif module in MOE_RECOMPUTE_MODULES and not model.is_moe:
            wrong.append(f"{module} (no MoE layers)")
        elif module == "shared_experts" and not model.moe_shared_expert_size:
            wrong.append(f"{module} (no shared expert)")
        elif module == "mlp" and all(model.moe_layer_mask()):
            wrong.append(f"{module} (no dense layers)")
        elif module == "gdn_norm_out" and not has_gdn(model):
            wrong.append(f"{module} (no gated DeltaNet layers)")
    return wrong


@rule
def recompute_modules_match_model(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Every recompute module exists in the model (`missing_recompute_modules`; Megatron-core
    raises for ``mla_up_proj`` without MLA and ``moe_act`` without MoE, the others would
    recompute nothing)."""
    wrong = missing_recompute_modules(model, plan.selective_modules)
    if not wrong:
        return None
    return (
        f"recompute_modules name modules model {model.name!r} lacks: {', '.join(wrong)}: "
        "drop them from recompute_modules"
    )


@rule
def cpu_offloading_layers_below_num_layers(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """cpu_offloading_num_layers < num_layers (Megatron-core: "CPU offloading can be done
    only for layers less than num_layers")."""
    n = plan.cpu_offloading_num_layers
    if n < model.num_layers:
        return None
    return (
        f"cpu_offloading_num_layers ({n}) must be below num_layers ({model.num_layers}): "
        f"set it to at most {model.num_layers - 1}"
    )


@rule
def cpu_offloading_without_pipeline_or_recompute(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Layer-level CPU offloading needs pp == 1 and no recompute (Megatron-core: "no support
    for Pipeline parallelism with CPU offloading", "CPU offloading does not work when
    activation recomputation is enabled")."""
    if plan.cpu_offloading_num_layers == 0 or (plan.pp == 1 and plan.recompute == "none"):
        return None
    return (
        f"cpu_offloading_num_layers ({plan.cpu_offloading_num_layers}) needs pp = 1 and "
        f"recompute 'none', got pp ({plan.pp}) and recompute ('{plan.recompute}'): set "
        "cpu_offloading_num_layers=0, or pp=1 and recompute='none'"
    )


@rule
def offload_modules_valid(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Fine-grained offloading: not together with layer-level offloading, ``attn_proj`` only
    with ``core_attn``, ``expert_fc1``/``moe_act`` only with MoE layers (Megatron-core
    asserts the first two)."""
    modules = plan.offload_modules
    if not modules:
        return None
    if plan.cpu_offloading_num_layers:
        problem = f"cpu_offloading_num_layers ({plan.cpu_offloading_num_layers}) is also set"
        fix = "use one form of offloading"
    elif "attn_proj" in modules and "core_attn" not in modules:
        problem, fix = "attn_proj is offloaded without core_attn", "add core_attn"
    elif not model.is_moe and any(m in MOE_OFFLOAD_MODULES for m in modules):
        problem = f"model {model.name!r} has no MoE layers"
        fix = f"drop {', '.join(m for m in modules if m in MOE_OFFLOAD_MODULES)}"
    else:
        return None
    return f"offload_modules ({','.join(modules)}): {problem}: {fix}"


SAVER_RULES = (
    recompute_modules_need_selective,
    recompute_modules_match_model,
    cpu_offloading_layers_below_num_layers,
    cpu_offloading_without_pipeline_or_recompute,
    offload_modules_valid,
)
"""The memory-saver rules in check order."""


def executor_saver_refusal(plan: ParallelPlan) -> str | None:
    """Why paraplan's own executor (and the torch runtime that prices it) cannot run the
    plan's memory savers, or None: it recomputes the attention core alone under selective
    recompute and offloads nothing."""
    modules = plan.recompute_modules
    if modules is not None and tuple(modules) != ("core_attn",):
        return (
            f"recompute_modules ({','.join(modules) or 'none'}): paraplan's executor "
            "recomputes core_attn alone under selective recompute: drop recompute_modules "
            "or price the plan with the megatron runtime"
        )
    if plan.offloads_activations:
        return (
            f"activation offloading (cpu_offloading_num_layers {plan.cpu_offloading_num_layers},"
            f" offload_modules {','.join(plan.offload_modules) or '-'}): paraplan's executor "
            "does not offload: drop it or price the plan with the megatron runtime"
        )
    return None
