"""Generators of the plan knobs: each yields only the values that are legal for its knob
given the model, the cluster and the knobs chosen before it (calculon's habit).

tp divides the heads, the query groups (or is a multiple of them), the dense and
shared-expert MLP widths, a hybrid model's Mamba-2 heads and groups, and by default stays
inside the scale-up domain; pp divides the layers; vpp divides the layers per stage; cp
divides the remaining ranks and seq % (2·cp) == 0, and for a hybrid model splits each tp
rank's Mamba-2 heads and groups (`mamba_cp_degrees`); ep divides the
experts; etp divides the expert width; sequence parallelism only with tp > 1; tp comm
overlap only with sequence parallelism; overlap_param_gather only with the distributed
optimizer (or Megatron-FSDP) and overlap_grad_reduce; Megatron-FSDP's sharding strategies
beside the distributed optimizer when dp·cp > 1. `planner.space_tables` composes them into
the candidate tables; the column form of their values is `planner.space`'s.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from costmodel.plan_frame import DEFAULT_MODULES, modules_column
from planner.space import SearchSpace, column_value
from planner.splits import EVEN_SPLIT, SPLIT_COLUMNS, has_split, split_options
from specs.kv_sharding import kv_heads_fit_tp, kv_sub_sharded
from specs.model import ModelSpec
from specs.pipeline_layout import layout_vpp
from specs.plan import MEGATRON_MIN_BUCKET_PARAMS
from specs.rules_base import divisors
from specs.rules_hybrid import gdn_split_fits, mamba_cp_split_fits
from specs.rules_savers import missing_recompute_modules

# ---- degree generators ---------------------------------------------------------------------


def tp_degrees(
    model: ModelSpec,
    num_gpus: int,
    scale_up_domain: int,
    *,
    beyond_scale_up: bool = False,
    kv_sub_sharding: bool = True,
) -> Iterator[int]:
    """Tensor-parallel sizes: divisors of the GPU count that divide the heads, divide the
    query groups or, with ``kv_sub_sharding``, are a multiple of them
    (`specs.kv_sharding.kv_heads_fit_tp`; MLA has no groups), divide the dense and
    shared-expert MLP widths, and fit the scale-up domain unless ``beyond_scale_up``
    (Megatron's parallel linears; megatron-facts.md §8.3 rule 4).

    A size inside the scale-up domain must also divide it (one beyond it be a multiple of
    it): TP groups are runs of consecutive ranks (tp-cp-ep-dp-pp order), so tp = 3 on
    8-GPU servers puts ranks 6, 7, 8 on two servers and that group's collectives, which
    every layer waits for, cross the NICs. The cost model prices such a group at its
    slowest instance (`costmodel.topology.plan_placements`); the search leaves these sizes
    out."""
    groups = model.query_groups
    kinds = model.layer_kinds()
    dense_mlp = any(kind.mlp == "dense" for kind in kinds)
    if any(kind.mixer == "mamba" for kind in kinds):
        num_gpus = math.gcd(num_gpus, model.mamba_heads, model.mamba_num_groups)
    if any(kind.mixer == "gdn" for kind in kinds):
        num_gpus = math.gcd(num_gpus, model.linear_num_key_heads, model.linear_num_value_heads)
    for tp in divisors(math.gcd(num_gpus, model.num_attention_heads)):
        if not beyond_scale_up and tp > scale_up_domain:
            continue
        if scale_up_domain % tp and tp % scale_up_domain:
            continue
        if not model.uses_mla and not kv_heads_fit_tp(groups, tp):
            continue
        if not kv_sub_sharding and kv_sub_sharded(model, tp):
            continue
        if dense_mlp and model.ffn_hidden_size % tp:
            continue
        if model.is_moe and model.moe_shared_expert_size % tp:
            continue
        yield tp


def pp_degrees(model: ModelSpec, ranks: int, *, uneven: bool = True) -> Iterator[int]:
    """Pipeline stages: divisors of the ranks left after tp that have an even or (with
    ``uneven``) an uneven layer split Megatron accepts (`planner.splits`;
    megatron-facts.md §8.3 rule 5)."""
    if not uneven:
        yield from (p for p in divisors(model.num_layers) if ranks % p == 0)
        return
    yield from (p for p in divisors(ranks) if p <= model.num_layers and has_split(model, p))


def vpp_degrees(model: ModelSpec, pp: int, *, uneven: bool = True) -> Iterator[int]:
    """Model chunks per pipeline rank: 1, and with pp > 1 every count that the even split
    or (with ``uneven``) one of the splits of `planner.splits` divides into whole chunks
    (§8.3 rules 6-7)."""
    if pp == 1 or (not uneven and model.num_layers % pp):
        yield 1
        return
    if not uneven:
        yield from divisors(model.num_layers // pp)
        return
    yield from (v for v in range(1, (model.num_layers + 2) // pp + 1) if has_split(model, pp, v))


def layout_vpp_degrees(space: SearchSpace, pp: int, vpps: Iterable[int]) -> Iterator[int]:
    """``vpps`` narrowed to the virtual pipeline size a fixed pipeline layout implies on
    ``pp`` ranks (its stages / pp, `specs.pipeline_layout.layout_vpp`), as Megatron-LM
    derives it from ``--pipeline-model-parallel-layout``; ``vpps`` unchanged without a
    fixed layout, or when pp does not divide its stages or the size is not among ``vpps``
    (the rules then reject the candidates, with the reason)."""
    candidates = tuple(vpps)
    layout = space.fixed.get("pipeline_model_parallel_layout")
    derived = layout_vpp(layout, pp) if layout else None
    yield from (derived,) if derived in candidates else candidates


def split_choices(model: ModelSpec, pp: int, vpp: int, space: SearchSpace) -> list[dict[str, Any]]:
    """The split options of (pp, vpp) (`planner.splits.split_options`); when the user fixed
    any split knob, that split alone (the other split knobs even)."""
    fixed = {k: column_value(k, space.fixed[k]) for k in SPLIT_COLUMNS if space.is_fixed(k)}
    if fixed:
        return [EVEN_SPLIT | fixed]
    options = split_options(model, pp, vpp)
    uneven = space.uneven_splits and space.has("uneven_pipeline_split")
    return options if uneven else [o for o in options if o == EVEN_SPLIT]


def cp_degrees(
    seq_length: int,
    ranks: int,
    min_tokens_per_rank: int = 1,
    document_tokens: int | None = None,
) -> Iterator[int]:
    """Context-parallel sizes: divisors of the ranks left after tp·pp with
    seq_length % (2·cp) == 0 (zigzag load balancing; megatron-facts.md §7.1) and at least
    ``min_tokens_per_rank`` tokens of a sequence per CP rank; with packed sequences
    (``document_tokens``) also document_tokens % (2·cp) == 0
    (`specs.rules_features.packed_document_divisible_by_2cp`)."""
    doc = seq_length if document_tokens is None else document_tokens
    for c in divisors(ranks):
        if c == 1 or (
            seq_length % (2 * c) == 0
            and doc % (2 * c) == 0
            and seq_length // c >= min_tokens_per_rank
        ):
            yield c


def mamba_cp_degrees(model: ModelSpec, tp: int, cps: Iterable[int]) -> Iterator[int]:
    """The cp degrees of ``cps`` that Megatron's ``MambaContextParallel`` accepts for the
    model's Mamba-2 mixers at this tp (`specs.rules_hybrid.mamba_cp_split_fits`): all of
    them for a model without Mamba-2 layers; for gated DeltaNet layers, the cp degrees
    for which tp·cp divides their heads (`specs.rules_hybrid.gdn_split_fits`)."""
    yield from (
        c for c in cps if mamba_cp_split_fits(model, tp, c) and gdn_split_fits(model, tp, c)
    )


def ep_degrees(model: ModelSpec, stage_ranks: int) -> Iterator[int]:
    """Expert-parallel sizes: 1 for dense models, else divisors of the experts that divide
    the tp·cp·dp ranks of a pipeline stage (EP folds over them; megatron-facts.md §4.1)."""
    if not model.is_moe:
        yield 1
        return
    yield from (e for e in divisors(math.gcd(model.num_experts, stage_ranks)))


def etp_degrees(
    model: ModelSpec,
    tp: int,
    ep: int,
    stage_ranks: int,
    scale_up_domain: int,
    *,
    beyond_scale_up: bool = False,
    any_size: bool = True,
) -> Iterator[int]:
    """Expert tensor-parallel sizes: tp for dense models; for MoE the divisors of the
    expert width with etp·ep dividing the stage ranks, within the scale-up domain unless
    ``beyond_scale_up``, and only 1 and tp unless ``any_size`` (megatron-facts.md §7.3)."""
    if not model.is_moe:
        yield tp
        return
    for etp in divisors(model.expert_ffn_hidden_size):
        if not any_size and etp not in (1, tp):
            continue
        if stage_ranks % (etp * ep) == 0 and (beyond_scale_up or etp <= scale_up_domain):
            yield etp


def micro_batch_sizes(global_batch_size: int, limit: int) -> Iterator[int]:
    """Micro-batch sizes: divisors of the global batch up to ``limit``. Whether mbs·dp
    divides the batch is `global_batch_divisible_by_mbs_dp`'s to decide."""
    yield from (b for b in divisors(global_batch_size) if b <= limit)


# ---- switch generators ---------------------------------------------------------------------


def sequence_parallel_options(tp: int, seq_length: int, cp: int) -> Iterator[tuple[bool, bool]]:
    """(sequence_parallel, tp_comm_overlap) pairs: SP needs tp > 1 and the tokens of a CP
    rank divisible by tp; tp comm overlap needs SP (megatron-facts.md §6, §8.3 rule 10)."""
    yield False, False
    if tp > 1 and seq_length % cp == 0 and (seq_length // cp) % tp == 0:
        yield True, False
        yield True, True


def recompute_options(
    layers_per_chunk: int,
    fractions: Sequence[float],
    module_sets: Sequence[str] = (),
) -> Iterator[tuple[str, int, str, str]]:
    """(recompute, recompute_num_layers, recompute_method, recompute_modules) tuples: none;
    selective (the attention core, Megatron's default modules) and selective of each of
    ``module_sets`` (table form, `costmodel.plan_frame.modules_column`); full with every
    layer its own checkpoint (uniform, 1 layer); and full for the first n layers of each
    chunk (block), n a fraction of the chunk (Megatron `--recompute-*`; megatron-facts.md
    §8.3 rule 11)."""
    yield "none", 0, "uniform", DEFAULT_MODULES
    yield "selective", 0, "uniform", DEFAULT_MODULES
    yield from (("selective", 0, "uniform", s) for s in module_sets if s != DEFAULT_MODULES)
    yield "full", 1, "uniform", DEFAULT_MODULES
    blocks = {round(f * layers_per_chunk) for f in fractions}
    yield from (
        ("full", n, "block", DEFAULT_MODULES) for n in sorted(blocks) if 1 <= n < layers_per_chunk
    )


def recompute_module_sets(model: ModelSpec, space: SearchSpace) -> tuple[str, ...]:
    """The per-module recompute sets of ``space`` to try on ``model``, in table form: the
    fixed one alone, else (with the ``recompute_modules`` feature) each of
    `SearchSpace.recompute_module_sets` whose modules the model has
    (`specs.rules_savers.missing_recompute_modules`, the rule ``recompute_modules_match_model``)
    and that differs from Megatron's default (``core_attn`` alone)."""
    if space.is_fixed("recompute_modules"):
        return (column_value("recompute_modules", space.fixed["recompute_modules"]),)
    if not space.has("recompute_modules"):
        return ()
    return tuple(
        modules_column(tuple(modules))
        for modules in space.recompute_module_sets
        if tuple(modules) != ("core_attn",) and not missing_recompute_modules(model, modules)
    )


def optimizer_options() -> Iterator[tuple[bool, bool, bool]]:
    """(distributed_optimizer, overlap_grad_reduce, overlap_param_gather) triples;
    overlapping the parameter gather needs both others (megatron-facts.md §5.3)."""
    for dist_opt, grad in itertools.product((False, True), repeat=2):
        yield dist_opt, grad, False
        if dist_opt and grad:
            yield dist_opt, grad, True


def megatron_fsdp_options(dp: int, cp: int, strategies: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Megatron-FSDP switch settings: for each of ``strategies`` (with dp·cp > 1, where
    there is something to shard) use_megatron_fsdp with that strategy, the gradient
    reduce-scatter and parameter gathers overlapped (`--overlap-grad-reduce`,
    `--overlap-param-gather`, as Megatron-FSDP recipes run it), Megatron's default bucket
    and no distributed optimizer, which Megatron-FSDP excludes (`specs.rules_fsdp`)."""
    if dp * cp < 2:
        return
    for strategy in strategies:
        yield {
            "distributed_optimizer": False,
            "overlap_grad_reduce": True,
            "overlap_param_gather": True,
            "ddp_bucket_size": 0,
            "use_megatron_fsdp": True,
            "data_parallel_sharding_strategy": strategy,
        }


def bucket_sizes(
    dp: int, cp: int, overlap_grad_reduce: bool, factors: Sequence[float]
) -> Iterator[int]:
    """DDP bucket sizes in parameters, 0 meaning Megatron's default max(40M, 1M·dp·cp)
    (`resolve_ddp_bucket_size`, megatron-facts.md §5.1), then ``factors`` x that default.
    Without overlap_grad_reduce Megatron uses one bucket per buffer: only the default."""
    yield 0
    if not overlap_grad_reduce:
        return
    default = max(MEGATRON_MIN_BUCKET_PARAMS, 1_000_000 * dp * cp)
    yield from sorted({int(default * f) for f in factors} - {default})
