"""Plan rules of a hybrid model's shapes (``ModelSpec.hybrid_layer_pattern``): the
tensor-parallel split of its Mamba-2 mixers.

Source: Megatron-LM d98e8a64 ``megatron/core/ssm/mamba_mixer.py`` ``MambaMixer.__init__``
asserts "nheads must be evenly divisble by tp_size" and "ngroups must be evenly divisible
by tp_size": each tensor-parallel rank holds H / tp heads and G / tp groups of the B and C
projections. The refusals of what a hybrid model is not priced or run with live with
their kind: context parallelism in `specs.rules_features`, Muon in
`specs.rules_optimizer`, LoRA in `specs.rules_lora`, the executor and the torch runtime in
`specs.hybrid_checks.executor_hybrid_refusal`. Each rule follows `specs.rules_base`
conventions; `specs.rules.RULES` lists them.
"""

from __future__ import annotations

import math

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.kv_sharding import kv_heads_fit_tp
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules_base import degree_choices, ratio, rule


def _mamba_tp_options(model: ModelSpec, tp: int, num_gpus: int) -> str:
    """tp degrees near ``tp`` that split the attention heads, the query groups, the Mamba-2
    heads and groups alike."""
    shared = math.gcd(model.num_attention_heads, model.mamba_heads, model.mamba_num_groups)
    return degree_choices(
        shared, tp, num_gpus, keep=lambda d: kv_heads_fit_tp(model.query_groups, d)
    )


@rule
def mamba_heads_and_groups_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """H % tp == 0 and G % tp == 0 for a hybrid model's Mamba-2 mixers (`MambaMixer`
    asserts both): each tp rank holds H / tp heads (d_inner / tp channels) and G / tp
    groups of the B and C projections. `specs.hybrid_checks` makes H a multiple of G, so
    the groups decide: a tp that divides G divides H."""
    if "M" not in (model.hybrid_layer_pattern or ""):
        return None
    heads, groups, tp = model.mamba_heads, model.mamba_num_groups, plan.tp
    if heads % tp == 0 and groups % tp == 0:
        return None
    return (
        f"Mamba-2 heads ({heads}, mamba_num_heads or 2·hidden_size / mamba_head_dim) and "
        f"mamba_num_groups ({groups}) must be divisible by tp ({tp}) ({ratio(heads, tp)} "
        f"heads and {ratio(groups, tp)} groups per rank; Megatron's MambaMixer asserts it): "
        f"try tp in {_mamba_tp_options(model, tp, cluster.num_gpus)}"
    )


HYBRID_RULES = (mamba_heads_and_groups_divisible_by_tp,)
"""The hybrid-model shape rules in check order."""
