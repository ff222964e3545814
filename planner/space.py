"""The search space: what the user fixed and the bounds of the searched knobs
(`SearchSpace`), the column layout of the candidate tables, and the conversion between a
table row and a `ParallelPlan`.

Each knob has a small generator that yields only values that are legal for that knob given
the model, the cluster and the knobs chosen before it (`planner.knob_generators`,
calculon's habit); the generators are composed into two pandas tables joined on the
*context* (tp, pp, vpp, cp, dp) and expanded into one row per candidate plan
(`planner.space_tables`). Relations between knobs that no single generator owns (the
global batch against mbs·dp, interleaving's microbatches % pp) are left to
`specs.rules.check_plan`, so the planner can count how many candidates each rule rejects.

Plan features the runtime lacks (`SearchSpace.features`, e.g. sequence parallelism or the
distributed optimizer under Megatron-LM 2021, `costmodel.execution_presets.MEGATRON_2021`) are
never generated.

A knob fixed by the user (`SearchSpace.fixed`, keyed by `ParallelPlan` field names) is
yielded as given, even when it is illegal: the rules then reject it with their id and fix.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from costmodel.cuda_graph_rules import (
    cpu_offloading_problem,
    full_recompute_problem,
    moe_recompute_problem,
    per_layer_graphs,
)
from costmodel.execution import ExecutionOptions
from costmodel.execution_rules import PLAN_FEATURES
from costmodel.plan_frame import DEFAULT_MODULES, modules_column, modules_from_column
from planner.defaults import DEFAULT_MAX_MICRO_BATCH_SIZE
from planner.splits import SPLIT_COLUMNS, split_columns, split_fields
from specs.errors import SpecError, unknown_name_message
from specs.model import ModelSpec
from specs.plan import ParallelPlan

RECOMPUTE_MODULE_SETS: tuple[tuple[str, ...], ...] = (
    ("core_attn",),
    ("layernorm", "moe_act"),
    ("core_attn", "layernorm", "moe_act"),
    ("mla_up_proj",),
    ("moe",),
    ("gdn_norm_out",),
    ("layernorm", "moe_act", "gdn_norm_out"),
)
"""Per-module selective recompute sets the search tries (`--recompute-modules`), each where
the model has every module (`specs.rules_savers.recompute_modules_match_model`):
``core_attn`` is Megatron-core's default (the plain selective candidate); ``layernorm`` with
``moe_act`` the narrow MoE set of the Megatron-MoE model zoo's Qwen3 recipes
(`best_practice/qwen3/run_235b.sh`) and Megatron-Bridge's MoE example
(`docs/training/activation-recomputation.md`), with ``core_attn`` added; ``mla_up_proj`` the
first MLA candidate (Megatron-Bridge's module table; the model zoo's DeepSeek-V3 recipes,
`best_practice/deepseek-v3/run_deepseek_v3_h100.sh`); ``moe`` the whole MoE block (model
zoo `best_practice/qwen3/run_235b.sh`); ``gdn_norm_out`` the gated DeltaNet output norm
(Megatron-core's module for that layer, `_GDNBase.__init__`), alone and with the narrow MoE
set."""

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
    bucket sizes besides the default, ``recompute_modules`` the per-module recompute sets,
    ``kv_sub_sharding`` tp degrees above the key/value heads.
    Knobs the user fixed are yielded as given. CPU activation offloading is never searched,
    only fixed."""

    full_recompute: bool = True
    """Try full recompute; `for_runtime` turns it off under per-layer CUDA graphs, which
    Megatron-core runs with selective or no recompute only
    (`costmodel.cuda_graph_rules.full_recompute_problem`)."""
    sharded_optimizer_only: bool = False
    """Only plans with the distributed optimizer or Megatron-FSDP: Megatron-core runs the
    precision-aware optimizer with nothing else
    (`costmodel.optimizer_state.precision_aware_unmet`; `for_runtime` sets it), and
    Megatron-LM's `validate_args` takes ``--fp8-param-gather`` of an Adam job with nothing
    else (`paraplan plan` sets it)."""

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
        offload a distributed optimizer fixed off. A runtime other than ``megatron`` drops
        ``kv_sub_sharding``: paraplan's executor splits the key/value projections over tp
        (`specs.kv_sharding.executor_kv_refusal`)."""
        sharding = {"distributed_optimizer", "megatron_fsdp"} & options.plan_features
        if options.precision_aware_optimizer and not sharding:
            raise SpecError(
                "precision_aware_optimizer needs the distributed optimizer or Megatron-FSDP, "
                "and the options' plan_features have neither; add distributed_optimizer to "
                "plan_features, or drop precision_aware_optimizer"
            )
        features = self.features & options.plan_features
        if options.runtime != "megatron":
            features = features - {"kv_sub_sharding"}
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
        graphs = _cuda_graph_narrowing(self, options.cuda_graph_scopes)
        return dataclasses.replace(
            self,
            **graphs,
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
            return (column_value(name, self.fixed[name]),)
        return tuple(generated)


def _cuda_graph_narrowing(space: SearchSpace, scopes: frozenset[str]) -> dict[str, Any]:
    """The `SearchSpace` fields CUDA graphs narrow: no full recompute under per-layer graphs
    and no per-module recompute set with ``moe`` under a captured ``moe_router``
    (`costmodel.cuda_graph_rules`); `SpecError` where a fixed knob asks for what they
    exclude."""
    probe = ParallelPlan(
        recompute=space.fixed.get("recompute", "none"),
        recompute_modules=space.fixed.get("recompute_modules"),
        cpu_offloading_num_layers=space.fixed.get("cpu_offloading_num_layers", 0),
    )
    if probe.recompute_modules is not None and "recompute" not in space.fixed:
        probe = dataclasses.replace(probe, recompute="selective")
    for check in (full_recompute_problem, moe_recompute_problem, cpu_offloading_problem):
        problem = check(probe, scopes)
        if problem is not None:
            raise SpecError(problem)
    if not per_layer_graphs(scopes):
        return {}
    sets = space.recompute_module_sets
    if "moe_router" in scopes:
        sets = tuple(m for m in sets if "moe" not in m)
    return {"full_recompute": False, "recompute_module_sets": sets}


def column_value(name: str, value: Any) -> Any:
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
    row["recompute_modules"] = column_value("recompute_modules", plan.recompute_modules)
    row["offload_modules"] = column_value("offload_modules", plan.offload_modules)
    row.update(split_columns(plan))
    return row
