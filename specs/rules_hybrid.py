"""Plan rules of a hybrid model's shapes (``ModelSpec.hybrid_layer_pattern``): the
tensor- and context-parallel split of its Mamba-2 mixers and of its gated DeltaNets.

Sources: Megatron-LM d98e8a64 ``megatron/core/ssm/mamba_mixer.py`` ``MambaMixer.__init__``
asserts "nheads must be evenly divisble by tp_size" and "ngroups must be evenly divisible
by tp_size": each tensor-parallel rank holds H / tp heads and G / tp groups of the B and C
projections. With cp > 1, ``megatron/core/ssm/mamba_context_parallel.py``
``MambaContextParallel.__init__`` splits those heads again over the cp ranks for the conv1d
and the SSD scan: it asserts ``nheads_local_tp % cp_size == 0`` and, for the G / tp groups,
``cp_size % ngroups_local_tp == 0`` when G / tp < cp (each group's B and C are repeated on
cp / (G / tp) ranks, ``group_repeat_count``) or ``ngroups_local_tp % cp_size == 0``
otherwise. A gated DeltaNet (``megatron/core/ssm/gated_delta_net/common.py``,
`_GDNBase.__init__`) holds ``linear_num_key_heads / tp`` key heads and
``linear_num_value_heads / tp`` value heads per rank (``num_k_heads_local_tp``,
``num_v_heads_local_tp``); under context parallelism it splits them again over the cp
ranks (``a2a_cp_to_hp``, ``feat_dim_split``), and `TransformerConfig.__post_init__`
asserts both head counts divisible by tp·cp (`gdn_heads_divisible_by_tp_cp`). The refusals
of what a hybrid model is not priced or run with live with their kind: Muon in
`specs.rules_optimizer`, LoRA in `specs.rules_lora`, the executor and the torch runtime in
`specs.hybrid_checks.executor_hybrid_refusal`. Each rule follows `specs.rules_base`
conventions; `specs.rules.RULES` lists them.
"""

from __future__ import annotations

import math

from specs.cluster import ClusterSpec
from specs.gdn_checks import has_gdn
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


def mamba_cp_split_fits(model: ModelSpec, tp: int, cp: int) -> bool:
    """Whether `MambaContextParallel.__init__` accepts cp for the H / tp heads and G / tp
    groups of a tp rank (module docstring); True for cp 1, a model without Mamba-2 layers,
    or a tp that does not split the mixer (`mamba_heads_and_groups_divisible_by_tp`
    reports that)."""
    if cp == 1 or "M" not in (model.hybrid_layer_pattern or ""):
        return True
    heads, groups = model.mamba_heads, model.mamba_num_groups
    if heads % tp or groups % tp:
        return True
    groups_tp = groups // tp
    groups_fit = cp % groups_tp == 0 if groups_tp < cp else groups_tp % cp == 0
    return (heads // tp) % cp == 0 and groups_fit


def _mamba_cp_options(model: ModelSpec, tp: int, cp: int, num_gpus: int) -> str:
    """cp degrees near ``cp`` that `mamba_cp_split_fits` accepts at this tp."""
    return degree_choices(
        model.mamba_heads // tp, cp, num_gpus, keep=lambda c: mamba_cp_split_fits(model, tp, c)
    )


@rule
def mamba_heads_divisible_by_tp_cp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """(H / tp) % cp == 0 for a hybrid model's Mamba-2 mixers with cp > 1
    (`MambaContextParallel.__init__`: "nheads must be evenly divisible by tp_size *
    cp_size"): the conv1d and the SSD scan of a rank run H / (tp·cp) heads over the whole
    sequence."""
    heads, tp, cp = model.mamba_heads, plan.tp, plan.cp
    if cp == 1 or "M" not in (model.hybrid_layer_pattern or "") or heads % tp:
        return None
    if (heads // tp) % cp == 0:
        return None
    return (
        f"Mamba-2 heads per tp rank, {heads} / tp ({tp}) = {heads // tp}, must be divisible "
        f"by cp ({cp}) ({ratio(heads // tp, cp)} heads per rank; Megatron's "
        f"MambaContextParallel asserts it): try cp in "
        f"{_mamba_cp_options(model, tp, cp, cluster.num_gpus)}"
    )


@rule
def mamba_groups_fit_cp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """The G / tp groups of a tp rank split over cp: cp % (G / tp) == 0 when G / tp < cp
    (the groups' B and C repeated over the cp ranks), else (G / tp) % cp == 0
    (`MambaContextParallel.__init__`: "cp_size must be evenly divisible by ngroups/tp_size",
    "ngroups must be evenly divisible by tp_size * cp_size")."""
    groups, tp, cp = model.mamba_num_groups, plan.tp, plan.cp
    if cp == 1 or "M" not in (model.hybrid_layer_pattern or "") or groups % tp:
        return None
    local = groups // tp
    if (cp % local == 0) if local < cp else (local % cp == 0):
        return None
    relation = (
        f"cp ({cp}) must be a multiple of it"
        if local < cp
        else f"it must be divisible by cp ({cp})"
    )
    return (
        f"Mamba-2 groups per tp rank, mamba_num_groups ({groups}) / tp ({tp}) = {local}: "
        f"{relation} (Megatron's MambaContextParallel asserts it): try cp in "
        f"{_mamba_cp_options(model, tp, cp, cluster.num_gpus)}"
    )


def gdn_split_fits(model: ModelSpec, tp: int, cp: int) -> bool:
    """Whether tp·cp divides the gated DeltaNet's key and value heads (module docstring);
    True for a model without ``G`` layers."""
    split = tp * cp
    heads = (model.linear_num_key_heads, model.linear_num_value_heads)
    return not has_gdn(model) or all(h % split == 0 for h in heads)


def _gdn_options(model: ModelSpec, tp: int, cp: int, num_gpus: int) -> str:
    """tp degrees near ``tp`` that split the attention heads and, with ``cp``, the gated
    DeltaNet's key heads alike (its value heads are a multiple of them, `specs.gdn_checks`)."""
    shared = math.gcd(model.num_attention_heads, model.linear_num_key_heads // cp or 1)
    return degree_choices(
        shared,
        tp,
        num_gpus,
        keep=lambda d: kv_heads_fit_tp(model.query_groups, d) and gdn_split_fits(model, d, cp),
    )


@rule
def gdn_heads_divisible_by_tp_cp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """linear_num_key_heads and linear_num_value_heads divisible by tp·cp for a model with
    gated DeltaNet layers (`TransformerConfig.__post_init__` asserts both; each tp rank
    holds its share of the in_proj, conv1d and out_proj channels by head, and each cp rank
    its share of those heads over the whole sequence)."""
    tp, cp = plan.tp, plan.cp
    if gdn_split_fits(model, tp, cp):
        return None
    keys, values, split = model.linear_num_key_heads, model.linear_num_value_heads, tp * cp
    return (
        f"gated DeltaNet heads, linear_num_key_heads ({keys}) and linear_num_value_heads "
        f"({values}), must be divisible by tp·cp ({tp}·{cp} = {split}) "
        f"({ratio(keys, split)} key heads per rank; Megatron's TransformerConfig asserts "
        f"it): try tp in {_gdn_options(model, tp, cp, cluster.num_gpus)}"
    )


HYBRID_RULES = (
    mamba_heads_and_groups_divisible_by_tp,
    mamba_heads_divisible_by_tp_cp,
    mamba_groups_fit_cp,
    gdn_heads_divisible_by_tp_cp,
)
"""The hybrid-model shape rules in check order."""
