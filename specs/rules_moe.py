"""Plan rules for mixture-of-experts layers: expert parallelism (ep) and expert tensor
parallelism (etp).

Megatron builds a second rank grid for expert layers, (etp, ep, edp, pp), over the same
world as the dense grid (tp, cp, dp, pp): ep is carved out of the tp·cp·dp ranks of one
pipeline stage ("MoE parallel folding"), so ep need not divide dp (megatron-facts.md §4.1).
Each rule follows `specs.rules_base` conventions; `specs.rules.RULES` lists them.
"""

from __future__ import annotations

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import degree_choices, divisors, fmt_set, nearest, ratio, rule


@rule
def ep_needs_moe(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """ep > 1 needs routed experts (Megatron validate_args: expert parallelism requires
    `--num-experts`; megatron-facts.md §8.3 rule 2)."""
    if plan.ep == 1 or model.is_moe:
        return None
    return (
        f"ep ({plan.ep}) > 1 needs a mixture-of-experts model, but model {model.name!r} has "
        f"num_experts (0): set ep=1"
    )


@rule
def etp_needs_moe(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """An expert tensor-parallel size other than tp needs routed experts: etp only shapes
    the expert grid (Megatron `ModelParallelConfig.expert_tensor_parallel_size`, defaulting
    to tp; `initialize_model_parallel` builds expert groups that a dense model never uses),
    so on a dense model it would change nothing that was asked for."""
    if plan.etp is None or plan.etp == plan.tp or model.is_moe:
        return None
    return (
        f"etp ({plan.etp}) differs from tp ({plan.tp}), but model {model.name!r} has "
        f"num_experts (0) and no expert layers to split: drop etp (--etp) or set it to tp"
    )


@rule
def experts_divisible_by_ep(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """num_experts % ep == 0: each EP rank holds num_experts / ep local experts
    (Megatron validate_args and `MoELayer`; megatron-facts.md §4.1)."""
    if not model.is_moe or model.num_experts % plan.ep == 0:
        return None
    experts = model.num_experts
    return (
        f"num_experts ({experts}) must be divisible by ep ({plan.ep}) "
        f"({ratio(experts, plan.ep)} local experts per rank): "
        f"try ep in {degree_choices(experts, plan.ep, cluster.num_gpus)}"
    )


@rule
def expert_ffn_divisible_by_etp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """Expert ffn % etp == 0: expert FC1/FC2 columns are split over etp ranks
    (Megatron `divide()` in the grouped expert linears; megatron-facts.md §7.3, §8.3 rule 4)."""
    ffn, etp = model.expert_ffn_hidden_size, plan.expert_tp
    if not model.is_moe or ffn % etp == 0:
        return None
    size = (
        f"moe_ffn_hidden_size ({ffn})"
        if model.moe_ffn_hidden_size is not None
        else f"ffn_hidden_size ({ffn}) (the expert size, as moe_ffn_hidden_size is unset)"
    )
    degree = f"etp ({etp})" if plan.etp is not None else f"etp (unset, so tp = {etp})"
    return (
        f"{size} must be divisible by {degree} ({ratio(ffn, etp)} expert columns per rank): "
        f"try etp in {degree_choices(ffn, etp, cluster.num_gpus)}"
    )


@rule
def expert_grid_divides_world(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """world % (etp·ep·pp) == 0, i.e. etp·ep divides the tp·cp·dp ranks of one pipeline
    stage, so the expert grid (etp, ep, edp, pp) tiles the world (Megatron
    `initialize_model_parallel`; megatron-facts.md §4.1, §8.3 rule 2)."""
    world, etp, ep, pp = plan.world_size, plan.expert_tp, plan.ep, plan.pp
    if world % (etp * ep * pp) == 0:
        return None
    stage = plan.tp * plan.cp * plan.dp
    head = (
        f"etp ({etp}) · ep ({ep}) = {etp * ep} must divide the ranks of one pipeline stage, "
        f"tp ({plan.tp}) · cp ({plan.cp}) · dp ({plan.dp}) = {stage} "
        f"(edp = world ({world}) / (etp·ep·pp = {etp * ep * pp}) must be whole)"
    )
    fits_experts = [e for e in divisors(stage) if not model.is_moe or model.num_experts % e == 0]
    fixes = []
    if stage % etp == 0:
        ep_options = [e for e in fits_experts if (stage // etp) % e == 0]
        fixes.append(f"ep in {fmt_set(nearest(ep_options, ep))} (etp kept at {etp})")
    etp_options = [t for t in divisors(stage) if stage % (t * ep) == 0]
    if etp_options:
        fixes.append(f"etp in {fmt_set(nearest(etp_options, etp))} (ep kept at {ep})")
    if not fixes:
        fixes.append(f"etp=1 with ep in {fmt_set(nearest(fits_experts, ep))}")
    return f"{head}: try {' or '.join(fixes)}"


MOE_RULES = (
    ep_needs_moe,
    etp_needs_moe,
    experts_divisible_by_ep,
    expert_ffn_divisible_by_etp,
    expert_grid_divides_world,
)
"""The expert rules in check order."""
