"""Cross-object validation of a `ParallelPlan` against its model, cluster and job.

Each rule is a small named function ``rule_id(model, cluster, job, plan) -> Violation | None``
whose function name is its stable id. They follow Megatron-LM's argument validation
(`validate_args`, `TransformerConfig`/`ModelParallelConfig.__post_init__`, the
microbatch calculator and the parallel linears; megatron-facts.md §3.3, §4, §5, §7, §8.3)
so that a plan passing `check_plan` also launches there. `RULES` lists every rule in check
order; `check_plan` runs them all and never raises on a bad plan: a rule whose precondition
is already broken by another rule (a division by a non-divisor, say) stays silent.

This module holds the world-size, tensor-parallel shape, pipeline and batch rules; DeepSeek
sparse attention's in `specs.rules_dsa`; a hybrid
model's Mamba-2 shape rules are in `specs.rules_hybrid`, expert rules in `specs.rules_moe`,
LoRA rules in `specs.rules_lora`, context/sequence parallelism, overlap switches, recompute
and position rules in `specs.rules_features`, and the message helpers in
`specs.rules_base`.
"""

from __future__ import annotations

import math

from specs.cluster import ClusterSpec
from specs.errors import SpecError, unknown_name_message
from specs.job import TrainingJob
from specs.kv_sharding import kv_heads_fit_tp
from specs.model import ModelSpec
from specs.pipeline_layout import balanced_layout
from specs.pipeline_split_checks import accounted_layers, even_split_problem, first_last_options
from specs.plan import ParallelPlan
from specs.rules_base import (
    MAX_SUGGESTIONS,
    Rule,
    Violation,
    degree_choices,
    divisors,
    fmt_set,
    multiples_around,
    nearest,
    ratio,
    rule,
)
from specs.rules_block import BLOCK_RULES
from specs.rules_dsa import DSA_RULES
from specs.rules_features import FEATURE_RULES
from specs.rules_fsdp import FSDP_RULES
from specs.rules_hybrid import HYBRID_RULES
from specs.rules_lora import LORA_RULES
from specs.rules_moe import MOE_RULES
from specs.rules_optimizer import OPTIMIZER_RULES
from specs.rules_pipeline import PIPELINE_RULES
from specs.rules_savers import SAVER_RULES

__all__ = [
    "RULES",
    "Rule",
    "Violation",
    "check_plan",
    "require_valid_plan",
    "rule_by_id",
    "rule_ids",
]


# ---- world size ----------------------------------------------------------------------


@rule
def world_size_matches(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """tp·pp·cp·dp == cluster.num_gpus (Megatron `initialize_model_parallel`:
    W % (t·p·c) == 0 and DP = W / (t·p·c); megatron-facts.md §4.1, §8.3 rule 1)."""
    gpus = cluster.num_gpus
    if plan.world_size == gpus:
        return None
    model_parallel = plan.tp * plan.pp * plan.cp
    head = (
        f"tp ({plan.tp}) · pp ({plan.pp}) · cp ({plan.cp}) · dp ({plan.dp}) = "
        f"{plan.world_size} must equal cluster.num_gpus ({gpus})"
    )
    if gpus % model_parallel == 0:
        return f"{head}: set dp={gpus // model_parallel} (num_gpus / (tp·pp·cp = {model_parallel}))"
    return (
        f"{head}, and tp·pp·cp = {model_parallel} does not divide {gpus}: choose tp, pp, cp "
        f"whose product is in {fmt_set(nearest(divisors(gpus), model_parallel))}"
    )


# ---- tensor parallelism over the model's shapes ----------------------------------------


@rule
def heads_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """a % tp == 0: attention heads are split over tp ranks (megatron-facts.md §8.3 rule 4)."""
    heads = model.num_attention_heads
    if heads % plan.tp == 0:
        return None
    return (
        f"num_attention_heads ({heads}) must be divisible by tp ({plan.tp}) "
        f"({ratio(heads, plan.tp)} heads per rank): "
        f"try tp in {degree_choices(heads, plan.tp, cluster.num_gpus)}"
    )


@rule
def query_groups_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """g % tp == 0 or tp % g == 0 for grouped-query attention: the K/V heads are split over
    the tp ranks, g / tp per rank, or, with more ranks than K/V heads, Megatron-core
    sub-shards the QKV activations and each rank keeps one K/V head
    (`specs.kv_sharding`; `TransformerConfig.__post_init__`: g "must be a multiple or
    divisor of tensor_model_parallel_size"). Plain multi-head attention (g = a) is covered
    by `heads_divisible_by_tp`; MLA has no KV groups."""
    groups, tp = model.num_query_groups, plan.tp
    if groups is None or model.uses_mla or kv_heads_fit_tp(groups, tp):
        return None
    options = degree_choices(
        model.num_attention_heads, tp, cluster.num_gpus, keep=lambda d: kv_heads_fit_tp(groups, d)
    )
    return (
        f"num_query_groups ({groups}) must be a multiple or a divisor of tp ({tp}) "
        f"({ratio(groups, tp)} KV heads per rank): try tp in {options}"
    )


@rule
def ffn_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """ffn_hidden_size % tp == 0 for the dense MLP layers: their columns are split over tp
    (Megatron `divide()` in ColumnParallelLinear; megatron-facts.md §8.3 rule 4). Skipped
    when no layer has a dense MLP (every layer MoE; a hybrid pattern without ``-``)."""
    ffn = model.ffn_hidden_size
    dense = any(kind.mlp == "dense" for kind in model.layer_kinds())
    if not dense or ffn % plan.tp == 0:
        return None
    return (
        f"ffn_hidden_size ({ffn}) must be divisible by tp ({plan.tp}) "
        f"({ratio(ffn, plan.tp)} MLP columns per rank): "
        f"try tp in {degree_choices(ffn, plan.tp, cluster.num_gpus)}"
    )


@rule
def shared_expert_ffn_divisible_by_tp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """moe_shared_expert_size % tp == 0: the shared expert is a dense MLP over the tp group
    (Megatron `SharedExpertMLP` uses the dense tensor-parallel linears)."""
    size = model.moe_shared_expert_size
    if not model.is_moe or size == 0 or size % plan.tp == 0:
        return None
    return (
        f"moe_shared_expert_size ({size}) must be divisible by tp ({plan.tp}) "
        f"({ratio(size, plan.tp)} shared-expert columns per rank): "
        f"try tp in {degree_choices(size, plan.tp, cluster.num_gpus)}"
    )


# ---- pipeline ------------------------------------------------------------------------


@rule
def layers_divisible_by_pp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """(num_layers + account-for flags) % pp == 0: the even split gives every stage the same
    number of layers, the embedding and loss counted as one layer each when their
    account-for flag is set (megatron-facts.md §8.3 rule 5). First/last stage counts and a
    layout replace the even split (`specs.rules_pipeline`); the fix offers equal first/last
    counts, else, when neither they nor the account-for flags divide, a `balanced_layout`."""
    problem = even_split_problem(model, plan)
    if problem is None or problem[0] != "layers_divisible_by_pp":
        return None
    layers, total, pp = model.num_layers, accounted_layers(model, plan), plan.pp
    counted = f" + {total - layers} (account-for flags) = {total}" if total != layers else ""
    fixes = [f"pp in {degree_choices(total, pp, cluster.num_gpus)}"]
    for extra, flags in (
        (1, "account_for_embedding_in_pipeline_split=True"),
        (
            2,
            "account_for_embedding_in_pipeline_split=True and "
            "account_for_loss_in_pipeline_split=True",
        ),
    ):
        if total == layers and (layers + extra) % pp == 0:
            fixes.append(f"set {flags}")
    options = first_last_options(layers, pp, plan.vpp, limit=1)
    layout = balanced_layout(layers, model.mtp_num_layers, pp, plan.vpp)
    if options and total == layers:
        x, middle = options[0]
        fixes.append(
            f"decoder_first_pipeline_num_layers={x} and decoder_last_pipeline_num_layers={x} "
            f"({middle} per middle stage)"
        )
    if len(fixes) == 1 and layout is not None:  # nothing but another pp
        fixes.append(f"pipeline_model_parallel_layout={layout!r}")
    return (
        f"num_layers ({layers}){counted} must be divisible by pp ({pp}) "
        f"({ratio(total, pp)} layers per stage): try {' or '.join(fixes)}"
    )


@rule
def layers_per_stage_divisible_by_vpp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """((num_layers + account-for flags) / pp) % vpp == 0: each stage splits into vpp equal
    model chunks (megatron-facts.md §8.3 rule 6)."""
    problem = even_split_problem(model, plan)
    if problem is None or problem[0] != "layers_per_stage_divisible_by_vpp":
        return None
    layers, total, pp, vpp = model.num_layers, accounted_layers(model, plan), plan.pp, plan.vpp
    per_stage = total // pp
    counted = f" + {total - layers} (account-for flags)" if total != layers else ""
    return (
        f"num_layers ({layers}){counted} / pp ({pp}) = {per_stage} layers per stage must be "
        f"divisible by vpp ({vpp}) ({ratio(per_stage, vpp)} layers per chunk): "
        f"try vpp in {fmt_set(nearest(divisors(per_stage), vpp))}"
    )


@rule
def schedule_matches_vpp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """schedule is `interleaved` exactly when vpp > 1 (Megatron picks the interleaved
    schedule iff a virtual pipeline size is set; megatron-facts.md §3.1)."""
    interleaved = plan.schedule == "interleaved"
    if interleaved == (plan.vpp > 1):
        return None
    if interleaved:
        layers, pp = model.num_layers, plan.pp
        chunks = [v for v in divisors(layers // pp) if v > 1] if layers % pp == 0 else []
        hint = f" dividing the {layers // pp} layers per stage, e.g. {chunks[0]}" if chunks else ""
        return (
            f"schedule ('interleaved') needs vpp > 1, got vpp ({plan.vpp}): "
            f"set schedule='1f1b' or vpp > 1{hint}"
        )
    return (
        f"schedule ('{plan.schedule}') with vpp ({plan.vpp}) > 1: model chunks need the "
        f"interleaved schedule: set schedule='interleaved' or vpp=1"
    )


@rule
def interleaved_needs_pp_gt_1(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """vpp > 1 needs pp > 1 (Megatron validate_args with the default p2p overlap;
    megatron-facts.md §3.3, §8.3 rule 7)."""
    if plan.vpp == 1 or plan.pp > 1:
        return None
    layers, vpp = model.num_layers, plan.vpp
    options = [
        p
        for p in divisors(math.gcd(layers, cluster.num_gpus))
        if p > 1 and (layers // p) % vpp == 0
    ]
    hint = f", e.g. pp in {fmt_set(options[:MAX_SUGGESTIONS])}" if options else ""
    return (
        f"vpp ({plan.vpp}) > 1 needs pp > 1, got pp ({plan.pp}): interleaving splits each "
        f"pipeline rank into vpp chunks: set vpp=1 or pp > 1{hint}"
    )


@rule
def interleaved_needs_microbatches_multiple_of_pp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """With interleaving, m >= pp and m % pp == 0 for m = global / (mbs·dp): Megatron
    schedules microbatches in groups of pp per model chunk and checks this at the first
    step (default group size N = pp; megatron-facts.md §3.3, §8.3 rule 7)."""
    batch, mbs, dp, pp = job.global_batch_size, plan.micro_batch_size, plan.dp, plan.pp
    if plan.vpp == 1 or pp == 1 or batch % (mbs * dp):
        return None
    micro = batch // (mbs * dp)
    if micro % pp == 0:
        return None
    fix = f"try global_batch_size in {multiples_around(batch, mbs * dp * pp)}"
    if batch % (dp * pp) == 0:
        mbs_options = nearest(divisors(batch // (dp * pp)), mbs)
        fix += f" or micro_batch_size in {fmt_set(mbs_options)}"
    return (
        f"the interleaved schedule needs num_microbatches = global_batch_size ({batch}) / "
        f"(micro_batch_size ({mbs}) · dp ({dp})) = {micro} to be a positive multiple of "
        f"pp ({pp}): {fix}"
    )


# ---- batch ---------------------------------------------------------------------------


@rule
def global_batch_divisible_by_mbs_dp(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> str | None:
    """global_batch_size % (mbs·dp) == 0, hence m >= 1 microbatches (Megatron's
    `ConstantNumMicroBatchesCalculator`; megatron-facts.md §8.3 rule 3)."""
    batch, mbs, dp = job.global_batch_size, plan.micro_batch_size, plan.dp
    step = mbs * dp
    if batch % step == 0:
        return None
    context = f"{ratio(batch, step)} microbatches" if batch > step else "no whole microbatch"
    fix = f"try global_batch_size in {multiples_around(batch, step)}"
    if batch % dp == 0:
        fix += f" or micro_batch_size in {fmt_set(nearest(divisors(batch // dp), mbs))}"
    return (
        f"global_batch_size ({batch}) must be a positive multiple of micro_batch_size ({mbs}) "
        f"· dp ({dp}) = {step} ({context}): {fix}"
    )


RULES: tuple[Rule, ...] = (
    world_size_matches,
    heads_divisible_by_tp,
    query_groups_divisible_by_tp,
    ffn_divisible_by_tp,
    shared_expert_ffn_divisible_by_tp,
    *HYBRID_RULES,
    *DSA_RULES,
    *MOE_RULES,
    *PIPELINE_RULES,
    layers_divisible_by_pp,
    layers_per_stage_divisible_by_vpp,
    schedule_matches_vpp,
    interleaved_needs_pp_gt_1,
    global_batch_divisible_by_mbs_dp,
    interleaved_needs_microbatches_multiple_of_pp,
    *FEATURE_RULES,
    *FSDP_RULES,
    *OPTIMIZER_RULES,
    *SAVER_RULES,
    *LORA_RULES,
    *BLOCK_RULES,
)
"""Every rule, in check order: world size, model shapes (with a hybrid model's Mamba-2
mixers, `specs.rules_hybrid`), experts, pipeline, batch, sequence, switches, Megatron-FSDP,
the optimizer, per-module recompute and activation offloading, LoRA (`specs.rules_lora`),
the parallel attention+MLP block (`specs.rules_block`)."""


def rule_ids() -> tuple[str, ...]:
    """The stable ids of `RULES`, in check order."""
    return tuple(r.__name__ for r in RULES)


def rule_by_id(rule_id: str) -> Rule:
    """The rule with this id; a miss raises `SpecError` listing every id."""
    for check in RULES:
        if check.__name__ == rule_id:
            return check
    raise SpecError(unknown_name_message("plan rule", rule_id, rule_ids()))


def check_plan(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> list[Violation]:
    """Run every rule; return the violations in check order ([] for a valid plan).

    Never raises on a bad plan: the planner uses the list to prune and to count reasons.
    """
    found = (check(model, cluster, job, plan) for check in RULES)
    return [v for v in found if v is not None]


def require_valid_plan(
    model: ModelSpec, cluster: ClusterSpec, job: TrainingJob, plan: ParallelPlan
) -> None:
    """Raise `SpecError` listing every violation, for callers that must not run a bad plan
    (the executor, the command line)."""
    violations = check_plan(model, cluster, job, plan)
    if violations:
        lines = "\n".join(f"  - {v}" for v in violations)
        raise SpecError(f"plan {plan.label()!r} breaks {len(violations)} rule(s):\n{lines}")
