"""The search space: constraint-aware generators of plan knobs, composed into pandas tables.

Each knob has a small generator that yields only values that are legal for that knob given
the model, the cluster and the knobs chosen before it (calculon's habit): tp divides the
heads, the query groups (or is a multiple of them), the dense and shared-expert MLP widths,
and by default stays inside the scale-up domain; pp divides the layers; vpp divides the
layers per stage; cp divides the remaining ranks and seq % (2·cp) == 0; ep divides the
experts; etp divides the expert width; sequence parallelism only with tp > 1; tp comm
overlap only with sequence parallelism; overlap_param_gather only with the distributed
optimizer (or Megatron-FSDP) and overlap_grad_reduce; Megatron-FSDP's sharding
strategies beside the distributed optimizer when dp·cp > 1. Relations between knobs that
no single generator owns (the global batch against mbs·dp, interleaving's microbatches %
pp) are left to `specs.rules.check_plan`, so the planner can count how many candidates
each rule rejects.

Plan features the runtime lacks (`SearchSpace.features`, e.g. sequence parallelism or the
distributed optimizer under Megatron-LM 2021, `costmodel.execution_presets.MEGATRON_2021`) are
never generated.

A knob fixed by the user (`SearchSpace.fixed`, keyed by `ParallelPlan` field names) is
yielded as given, even when it is illegal: the rules then reject it with their id and fix.

The space is two tables joined on the *context* (tp, pp, vpp, cp, dp):
- `degree_table`: one row per (tp, pp, vpp, cp, dp, ep, etp, micro_batch_size);
- `switch_table`: for each context, every legal combination of the switches (sequence
  parallel, tp comm overlap, recompute with its layers and method, distributed optimizer
  or Megatron-FSDP with its sharding strategy, overlap flags, DDP bucket size), which
  depend on the degrees only through the context;
- `expand` joins them into one row per candidate plan.

Column conventions: columns are `ParallelPlan` field names; ``recompute_num_layers`` and
``ddp_bucket_size`` use 0 for None (Megatron's default), so every column is a plain numpy
dtype; ``etp`` always holds the effective expert tensor-parallel size (tp for dense models);
``recompute_modules`` and ``offload_modules`` hold comma-joined names
(`costmodel.plan_frame.modules_column`: "" for Megatron's default).

Memory savers: per-module selective recompute sets (`RECOMPUTE_MODULE_SETS`) are searched
by the screen where memory binds (`planner.screening`), a fixed one is a switch value; CPU
activation offloading (``cpu_offloading_num_layers``, ``offload_modules``) is only fixed,
never searched, and fixing layer-level offloading keeps pp = 1 and recompute none, as
Megatron-core requires.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from costmodel.execution import ExecutionOptions
from costmodel.execution_rules import PLAN_FEATURES
from costmodel.plan_frame import DEFAULT_MODULES, modules_column, modules_from_column
from planner.defaults import DEFAULT_MAX_MICRO_BATCH_SIZE
from planner.splits import (
    EVEN_SPLIT,
    SPLIT_COLUMNS,
    has_split,
    split_columns,
    split_fields,
    split_options,
)
from specs.errors import SpecError, unknown_name_message
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import MEGATRON_MIN_BUCKET_PARAMS, ParallelPlan
from specs.rules_base import divisors
from specs.rules_savers import missing_recompute_modules

RECOMPUTE_MODULE_SETS: tuple[tuple[str, ...], ...] = (
    ("core_attn",),
    ("layernorm", "moe_act"),
    ("core_attn", "layernorm", "moe_act"),
    ("mla_up_proj",),
    ("moe",),
)
"""Per-module selective recompute sets the search tries (`--recompute-modules`), each where
the model has every module (`specs.rules_savers.recompute_modules_match_model`):
``core_attn`` is Megatron-core's default (the plain selective candidate); ``layernorm`` with
``moe_act`` the narrow MoE set of the Megatron-MoE model zoo's Qwen3 recipes
(`best_practice/qwen3/run_235b.sh`) and Megatron-Bridge's MoE example
(`docs/training/activation-recomputation.md`), with ``core_attn`` added; ``mla_up_proj`` the
first MLA candidate (Megatron-Bridge's module table; the model zoo's DeepSeek-V3 recipes,
`best_practice/deepseek-v3/run_deepseek_v3_h100.sh`); ``moe`` the whole MoE block (model
zoo `best_practice/qwen3/run_235b.sh`)."""

CONTEXT_COLUMNS = ("tp", "pp", "vpp", "cp", "dp")
"""Degrees the switches depend on; the key that joins the two tables."""
DEGREE_COLUMNS = (*CONTEXT_COLUMNS, "ep", "etp", "micro_batch_size", *SPLIT_COLUMNS)
"""Columns of `degree_table`."""
SWITCH_COLUMNS = (
    "sequence_parallel",
    "tp_comm_overlap",
    "recompute",
    "recompute_num_layers",
    "recompute_method",
    "distributed_optimizer",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "ddp_bucket_size",
    "use_megatron_fsdp",
    "data_parallel_sharding_strategy",
    "cp_comm_type",
    "recompute_modules",
    "cpu_offloading_num_layers",
    "offload_modules",
)
"""Columns `switch_table` adds to the context."""
PLAN_COLUMNS = (*DEGREE_COLUMNS, *SWITCH_COLUMNS, "schedule")
"""Every column of an expanded candidate table, in `ParallelPlan` field names."""
KNOBS = tuple(c for c in PLAN_COLUMNS if c != "schedule")
"""Knobs a user may fix; the schedule follows vpp."""
OPTIONAL_INT_KNOBS = ("recompute_num_layers", "ddp_bucket_size", "etp")
"""Knobs whose None (Megatron's default) is 0 in the tables."""

_NEUTRAL_SWITCHES: dict[str, Any] = {
    "sequence_parallel": False,
    "tp_comm_overlap": False,
    "recompute": "none",
    "recompute_num_layers": 0,
    "recompute_method": "uniform",
    "distributed_optimizer": False,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
    "ddp_bucket_size": 0,
    "use_megatron_fsdp": False,
    "data_parallel_sharding_strategy": "no_shard",
    "cp_comm_type": "p2p",
    "recompute_modules": DEFAULT_MODULES,
    "cpu_offloading_num_layers": 0,
    "offload_modules": DEFAULT_MODULES,
}
"""Switches that no rule rejects: the values degree rows are checked with."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """What to search: the knobs the user fixed and the bounds of the searched ones."""

    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Knob name (a `ParallelPlan` field, see `KNOBS`) -> the value every candidate takes;
    None is allowed for etp, recompute_num_layers and ddp_bucket_size (Megatron's default)."""
    tp_beyond_scale_up: bool = False
    """Also try tp larger than the scale-up (NVLink) domain; off by default because TP
    collectives run on every layer and crossing the NICs makes them many times slower."""
    max_micro_batch_size: int = DEFAULT_MAX_MICRO_BATCH_SIZE
    """Largest micro-batch size tried (sequences)."""
    bucket_factors: tuple[float, ...] = (0.5, 2.0)
    """DDP bucket sizes tried besides Megatron's default max(40M, 1M·dp·cp) parameters, as
    multiples of that default (only with overlap_grad_reduce: without it there is one
    bucket per buffer)."""
    any_expert_tp: bool = False
    """Try every expert tensor-parallel size that divides the expert width; by default only
    1 (recommended for fine-grained experts by Megatron's MoE guide) and tp (Megatron's
    default), which keeps MoE searches fast."""
    min_tokens_per_cp_rank: int = 512
    """Smallest share of a sequence one context-parallel rank may hold (seq / cp); below a
    few hundred tokens the attention blocks are too small to hide the K/V exchange."""
    block_recompute_fractions: tuple[float, ...] = (0.25, 0.5, 0.75)
    """Partial full recompute (`--recompute-method block`): fractions of a model chunk's
    layers that are recomputed, besides uniform recompute of every layer."""
    megatron_fsdp_strategies: tuple[str, ...] = ("optim_grads_params",)
    """Megatron-FSDP sharding strategies searched beside the distributed optimizer (with
    dp·cp > 1). By default only `optim_grads_params`, the one that also shards weights and
    so fits models nothing else fits (`optim` shards what the distributed optimizer does,
    `no_shard` nothing); each strategy adds a sixth of the candidates to screen. Fixing
    `data_parallel_sharding_strategy` tries that one alone."""
    uneven_splits: bool = True
    """Also try the uneven pipeline splits of `planner.splits` (Megatron and paraplan's own
    executor run them all); False keeps Megatron's default even split."""
    recompute_module_sets: tuple[tuple[str, ...], ...] = RECOMPUTE_MODULE_SETS
    """Per-module selective recompute sets tried besides Megatron's default (``core_attn``
    alone, which the plain selective candidate already is), each only for models that have
    every module of it and only where memory binds: the screen derives a candidate with a
    set from a selective candidate whose plan without recompute does not fit
    (`planner.screening`); they are not rows of the enumerated tables."""
    features: frozenset[str] = PLAN_FEATURES
    """Plan features the generators may use (`costmodel.execution_rules.PLAN_FEATURES`); the
    search narrows it to what the runtime implements (`for_runtime`). A missing feature
    removes the values that need it: ``sequence_parallel`` and ``tp_comm_overlap`` their
    switches, ``selective_recompute`` selective recompute, ``context_parallel`` cp > 1,
    ``distributed_optimizer`` the distributed optimizer, ``uneven_pipeline_split`` the
    uneven splits, ``interleaved_two_stages`` vpp > 1 with pp = 2,
    ``pipelined_grad_overlap`` overlap_grad_reduce with pp > 1, ``ddp_bucket_size`` the
    bucket sizes besides the default, ``recompute_modules`` the per-module recompute sets.
    Knobs the user fixed are yielded as given. CPU activation offloading is never searched,
    only fixed."""

    sharded_optimizer_only: bool = False
    """Only plans with the distributed optimizer or Megatron-FSDP: Megatron-core runs the
    precision-aware optimizer with nothing else
    (`costmodel.optimizer_state.precision_aware_unmet`; `for_runtime` sets it)."""

    def __post_init__(self) -> None:
        for name in self.fixed:
            if name not in KNOBS:
                raise SpecError("SearchSpace.fixed: " + unknown_name_message("knob", name, KNOBS))
        as_plan = {  # table form: 0 stands for None (Megatron's default)
            name: None if name in OPTIONAL_INT_KNOBS and value == 0 else value
            for name, value in self.fixed.items()
        }
        try:  # a fixed value obeys the field checks of ParallelPlan (degrees >= 1, ...)
            ParallelPlan(**as_plan)
        except SpecError as exc:
            raise SpecError(
                f"fixed knob out of range: {exc}; fix the value, or leave the knob unset to "
                "search it"
            ) from None
        for modules in self.recompute_module_sets:
            ParallelPlan(recompute="selective", recompute_modules=modules)  # known names
        for name in ("max_micro_batch_size", "min_tokens_per_cp_rank"):
            if getattr(self, name) < 1:
                raise SpecError(f"SearchSpace.{name} must be >= 1, got {getattr(self, name)}")
        bad = [f for f in (*self.bucket_factors, *self.block_recompute_fractions) if f <= 0]
        if bad:
            raise SpecError(
                f"SearchSpace bucket_factors and block_recompute_fractions must be > 0, got {bad}"
            )

    def has(self, feature: str) -> bool:
        """True when the generators may use plan feature ``feature``."""
        return feature in self.features

    def for_runtime(self, options: ExecutionOptions) -> SearchSpace:
        """This space narrowed to the plan features the runtime implements
        (`ExecutionOptions.plan_features`); with the precision-aware optimizer, to plans
        that shard the optimizer (`sharded_optimizer_only`); with optimizer CPU offload
        (`ExecutionOptions.optimizer_cpu_offload_fraction`, which needs the precision-aware
        optimizer), to the distributed optimizer without Megatron-FSDP, which refuses the
        offload (`costmodel.optimizer_offload.offload_violations`). `SpecError` when the
        precision-aware optimizer meets a framework with neither sharding feature, or the
        offload a distributed optimizer fixed off."""
        sharding = {"distributed_optimizer", "megatron_fsdp"} & options.plan_features
        if options.precision_aware_optimizer and not sharding:
            raise SpecError(
                "precision_aware_optimizer needs the distributed optimizer or Megatron-FSDP, "
                "and the options' plan_features have neither; add distributed_optimizer to "
                "plan_features, or drop precision_aware_optimizer"
            )
        features = self.features & options.plan_features
        fixed = self.fixed
        if options.optimizer_cpu_offload_fraction > 0:
            if fixed.get("distributed_optimizer", True) is not True:
                raise SpecError(
                    "optimizer CPU offload needs the distributed optimizer, got "
                    "distributed_optimizer fixed to False: drop --no-dist-opt, or drop "
                    "--optimizer-cpu-offload"
                )
            fixed = {**fixed, "distributed_optimizer": True}
            features = features - {"megatron_fsdp"}
        return dataclasses.replace(
            self,
            features=features,
            fixed=fixed,
            sharded_optimizer_only=self.sharded_optimizer_only or options.precision_aware_optimizer,
        )

    def is_fixed(self, name: str) -> bool:
        """True when the user fixed knob ``name``."""
        return name in self.fixed

    def choices(self, name: str, generated: Iterable[Any]) -> tuple[Any, ...]:
        """The fixed value of knob ``name`` alone, else the generated values."""
        if name in self.fixed:
            return (_column_value(name, self.fixed[name]),)
        return tuple(generated)


def _column_value(name: str, value: Any) -> Any:
    """A knob value in table form (None -> 0 for the optional integer knobs, module tuples
    as `costmodel.plan_frame.modules_column` strings)."""
    if name in OPTIONAL_INT_KNOBS and value is None:
        return 0
    if name == "recompute_modules":
        return value if isinstance(value, str) else modules_column(value)
    if name == "offload_modules":
        return value if isinstance(value, str) else modules_column(tuple(value) or None)
    if name in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        return value or 0
    if name == "pipeline_model_parallel_layout":
        return value or ""
    return value


# ---- degree generators ---------------------------------------------------------------------


def tp_degrees(
    model: ModelSpec, num_gpus: int, scale_up_domain: int, *, beyond_scale_up: bool = False
) -> Iterator[int]:
    """Tensor-parallel sizes: divisors of the GPU count that divide the heads, divide the
    query groups (g % tp == 0, Megatron-core's `divide(num_query_groups, tp)`; MLA has no
    groups), divide the dense and shared-expert MLP widths, and fit the scale-up domain unless
    ``beyond_scale_up`` (Megatron's parallel linears; megatron-facts.md §8.3 rule 4).

    A size inside the scale-up domain must also divide it (one beyond it be a multiple of
    it): TP groups are runs of consecutive ranks (tp-cp-ep-dp-pp order), so tp = 3 on
    8-GPU servers puts ranks 6, 7, 8 on two servers and that group's collectives, which
    every layer waits for, cross the NICs. The cost model places the group of rank 0
    (`costmodel.topology.plan_placements`), which stays inside one server, so such sizes
    would be priced as if every group did."""
    groups = model.query_groups
    dense_mlp = model.num_moe_layers < model.num_layers
    for tp in divisors(math.gcd(num_gpus, model.num_attention_heads)):
        if not beyond_scale_up and tp > scale_up_domain:
            continue
        if scale_up_domain % tp and tp % scale_up_domain:
            continue
        if not model.uses_mla and groups % tp:
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


def split_choices(model: ModelSpec, pp: int, vpp: int, space: SearchSpace) -> list[dict[str, Any]]:
    """The split options of (pp, vpp) (`planner.splits.split_options`); when the user fixed
    any split knob, that split alone (the other split knobs even)."""
    fixed = {k: _column_value(k, space.fixed[k]) for k in SPLIT_COLUMNS if space.is_fixed(k)}
    if fixed:
        return [EVEN_SPLIT | fixed]
    options = split_options(model, pp, vpp)
    uneven = space.uneven_splits and space.has("uneven_pipeline_split")
    return options if uneven else [o for o in options if o == EVEN_SPLIT]


def cp_degrees(seq_length: int, ranks: int, min_tokens_per_rank: int = 1) -> Iterator[int]:
    """Context-parallel sizes: divisors of the ranks left after tp·pp with
    seq_length % (2·cp) == 0 (zigzag load balancing; megatron-facts.md §7.1) and at least
    ``min_tokens_per_rank`` tokens of a sequence per CP rank."""
    for c in divisors(ranks):
        if c == 1 or (seq_length % (2 * c) == 0 and seq_length // c >= min_tokens_per_rank):
            yield c


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
        return (_column_value("recompute_modules", space.fixed["recompute_modules"]),)
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


# ---- the two tables ------------------------------------------------------------------------


def degree_table(
    model: ModelSpec,
    num_gpus: int,
    job: TrainingJob,
    space: SearchSpace,
    scale_up_domain: int,
) -> pd.DataFrame:
    """One row per combination of the degree generators (fixed knobs as given)."""
    wide = space.tp_beyond_scale_up
    rows = []
    tps = space.choices("tp", tp_degrees(model, num_gpus, scale_up_domain, beyond_scale_up=wide))
    uneven = space.uneven_splits and space.has("uneven_pipeline_split")
    for tp in tps:
        after_tp = max(1, num_gpus // tp)
        pps = pp_degrees(model, after_tp, uneven=uneven)
        if _offloads_layers(space):  # layer-level offloading runs without pipelining
            pps = iter((1,))
        for pp in space.choices("pp", pps):
            vpps = vpp_degrees(model, pp, uneven=uneven)
            if pp == 2 and not space.has("interleaved_two_stages"):
                vpps = iter((1,))
            for vpp in space.choices("vpp", vpps):
                after_pp = max(1, after_tp // pp)
                cps = cp_degrees(job.seq_length, after_pp, space.min_tokens_per_cp_rank)
                if not space.has("context_parallel"):
                    cps = iter((1,))
                splits = split_choices(model, pp, vpp, space) or [EVEN_SPLIT]
                for cp in space.choices("cp", cps):
                    dp = space.choices("dp", (max(1, after_pp // cp),))[0]
                    context = (tp, pp, vpp, cp, dp)
                    for row in _expert_rows(model, job, space, scale_up_domain, context):
                        rows += [(*row, *(split[k] for k in SPLIT_COLUMNS)) for split in splits]
    return pd.DataFrame(rows, columns=list(DEGREE_COLUMNS))


def _expert_rows(
    model: ModelSpec,
    job: TrainingJob,
    space: SearchSpace,
    scale_up_domain: int,
    context: tuple[int, int, int, int, int],
) -> list[tuple[int, ...]]:
    """Degree rows of one context: every (ep, etp, micro_batch_size)."""
    tp, _, _, cp, dp = context
    stage = tp * cp * dp
    wide = space.tp_beyond_scale_up
    mbs_values = space.choices(
        "micro_batch_size", micro_batch_sizes(job.global_batch_size, space.max_micro_batch_size)
    )
    rows = []
    for ep in space.choices("ep", ep_degrees(model, stage)):
        etps = etp_degrees(
            model,
            tp,
            ep,
            stage,
            scale_up_domain,
            beyond_scale_up=wide,
            any_size=space.any_expert_tp,
        )
        for etp in space.choices("etp", etps):
            rows += [(*context, ep, etp or tp, mbs) for mbs in mbs_values]
    return rows


def switch_rows(
    model: ModelSpec, job: TrainingJob, space: SearchSpace, context: Sequence[int]
) -> list[dict[str, Any]]:
    """Every legal switch combination for one context (tp, pp, vpp, cp, dp), as dicts."""
    tp, pp, vpp, cp, dp = (int(v) for v in context)
    chunk_layers = max(1, model.num_layers // (pp * vpp))
    seq_opts = _constrained(
        [
            {"sequence_parallel": s, "tp_comm_overlap": o}
            for s, o in sequence_parallel_options(tp, job.seq_length, cp)
            if (space.has("sequence_parallel") or not s) and (space.has("tp_comm_overlap") or not o)
        ],
        space,
    )
    # searched recompute sets are derived by the screen where memory binds (planner.screening)
    pinned = recompute_module_sets(model, space) if space.is_fixed("recompute_modules") else ()
    rc_opts = _constrained(
        [
            {
                "recompute": r,
                "recompute_num_layers": n,
                "recompute_method": m,
                "recompute_modules": s,
            }
            for r, n, m, s in recompute_options(
                chunk_layers, space.block_recompute_fractions, pinned
            )
            if (space.has("selective_recompute") or r != "selective")
            and (r == "none" or not _offloads_layers(space))
        ],
        space,
    )
    opt_opts = []
    factors = space.bucket_factors if space.has("ddp_bucket_size") else ()
    for d, g, p in optimizer_options():
        if (
            (d and not space.has("distributed_optimizer"))
            or (g and pp > 1 and not space.has("pipelined_grad_overlap"))
            or (not d and space.sharded_optimizer_only)
        ):
            continue
        for bucket in bucket_sizes(dp, cp, g, factors):
            opt_opts.append(
                {
                    "distributed_optimizer": d,
                    "overlap_grad_reduce": g,
                    "overlap_param_gather": p,
                    "ddp_bucket_size": bucket,
                    "use_megatron_fsdp": False,
                    "data_parallel_sharding_strategy": "no_shard",
                }
            )
    if space.has("megatron_fsdp"):
        strategies = space.choices(
            "data_parallel_sharding_strategy", space.megatron_fsdp_strategies
        )
        opt_opts += megatron_fsdp_options(dp, cp, [s for s in strategies if s != "no_shard"])
    opt_opts = _constrained(opt_opts, space)
    fixed = {"cp_comm_type": space.choices("cp_comm_type", ("p2p",))[0]}
    for name in ("cpu_offloading_num_layers", "offload_modules"):  # fixed only, never searched
        fixed[name] = space.choices(name, (_NEUTRAL_SWITCHES[name],))[0]
    base = dict(zip(CONTEXT_COLUMNS, (tp, pp, vpp, cp, dp), strict=True))
    return [base | s | r | o | fixed for s, r, o in itertools.product(seq_opts, rc_opts, opt_opts)]


def _offloads_layers(space: SearchSpace) -> bool:
    """True when the user fixed layer-level CPU offloading on, which Megatron-core runs only
    without recompute (`specs.rules_savers.cpu_offloading_without_pipeline_or_recompute`)."""
    return bool(space.fixed.get("cpu_offloading_num_layers", 0))


def _constrained(options: list[dict[str, Any]], space: SearchSpace) -> list[dict[str, Any]]:
    """Options agreeing with the fixed knobs among their keys; when none agrees (the fixed
    values are illegal together), the single option the fixed values ask for, neutral
    elsewhere, so that `check_plan` reports it."""
    keys = list(options[0])
    fixed = {k: _column_value(k, space.fixed[k]) for k in keys if k in space.fixed}
    if not fixed:
        return options
    kept = [o for o in options if all(o[k] == v for k, v in fixed.items())]
    if kept:
        return kept
    wanted = {k: _NEUTRAL_SWITCHES[k] for k in keys} | fixed
    if "recompute_modules" in fixed and "recompute" not in space.fixed:
        wanted["recompute"] = "selective"  # the modules are selective recompute's
    if wanted.get("recompute") == "full" and not wanted["recompute_num_layers"]:
        wanted["recompute_num_layers"] = 1
    return [wanted]


def switch_table(
    model: ModelSpec, job: TrainingJob, space: SearchSpace, contexts: pd.DataFrame
) -> pd.DataFrame:
    """Switch combinations of every distinct context in ``contexts``."""
    unique = contexts[list(CONTEXT_COLUMNS)].drop_duplicates()
    rows = [
        row
        for context in unique.itertuples(index=False, name=None)
        for row in switch_rows(model, job, space, context)
    ]
    return pd.DataFrame(rows, columns=[*CONTEXT_COLUMNS, *SWITCH_COLUMNS])


def expand(degrees: pd.DataFrame, switches: pd.DataFrame) -> pd.DataFrame:
    """Every candidate: each degree row with each switch row of its context, plus the
    schedule column (`interleaved` when vpp > 1)."""
    table = degrees.merge(switches, on=list(CONTEXT_COLUMNS), how="inner")
    table["schedule"] = table["vpp"].gt(1).map({True: "interleaved", False: "1f1b"})
    return table[list(PLAN_COLUMNS)].reset_index(drop=True)


def neutral_switches() -> dict[str, Any]:
    """Switch values no rule rejects, for checking degree rows on their own."""
    return dict(_NEUTRAL_SWITCHES)


def plan_from_row(row: Mapping[str, Any], model: ModelSpec) -> ParallelPlan:
    """The `ParallelPlan` of one table row (0 -> None for the optional integer knobs; etp
    None for dense models and when it equals tp, Megatron's default)."""
    tp, etp = int(row["tp"]), int(row["etp"])
    vpp = int(row["vpp"])
    return ParallelPlan(
        tp=tp,
        pp=int(row["pp"]),
        vpp=vpp,
        cp=int(row["cp"]),
        ep=int(row["ep"]),
        etp=etp if model.is_moe and etp != tp else None,
        dp=int(row["dp"]),
        micro_batch_size=int(row["micro_batch_size"]),
        sequence_parallel=bool(row.get("sequence_parallel", False)),
        tp_comm_overlap=bool(row.get("tp_comm_overlap", False)),
        recompute=str(row.get("recompute", "none")),  # type: ignore[arg-type]
        recompute_num_layers=int(row.get("recompute_num_layers", 0)) or None,
        recompute_method=str(row.get("recompute_method", "uniform")),  # type: ignore[arg-type]
        distributed_optimizer=bool(row.get("distributed_optimizer", False)),
        overlap_grad_reduce=bool(row.get("overlap_grad_reduce", False)),
        overlap_param_gather=bool(row.get("overlap_param_gather", False)),
        ddp_bucket_size=int(row.get("ddp_bucket_size", 0)) or None,
        cp_comm_type=str(row.get("cp_comm_type", "p2p")),  # type: ignore[arg-type]
        use_megatron_fsdp=bool(row.get("use_megatron_fsdp", False)),
        data_parallel_sharding_strategy=str(  # type: ignore[arg-type]
            row.get("data_parallel_sharding_strategy", "no_shard")
        ),
        schedule="interleaved" if vpp > 1 else "1f1b",
        recompute_modules=modules_from_column(  # type: ignore[arg-type]
            str(row.get("recompute_modules", DEFAULT_MODULES)), "recompute_modules"
        ),
        cpu_offloading_num_layers=int(row.get("cpu_offloading_num_layers", 0)),
        offload_modules=modules_from_column(  # type: ignore[arg-type]
            str(row.get("offload_modules", DEFAULT_MODULES)), "offload_modules"
        ),
        **split_fields(row),
    )


def plan_knobs(plan: ParallelPlan) -> dict[str, Any]:
    """A plan's knobs as a table row (inverse of `plan_from_row`)."""
    row = {name: getattr(plan, name) for name in PLAN_COLUMNS}
    row["etp"] = plan.expert_tp
    row["recompute_num_layers"] = plan.recompute_num_layers or 0
    row["ddp_bucket_size"] = plan.ddp_bucket_size or 0
    row["recompute_modules"] = _column_value("recompute_modules", plan.recompute_modules)
    row["offload_modules"] = _column_value("offload_modules", plan.offload_modules)
    row.update(split_columns(plan))
    return row
