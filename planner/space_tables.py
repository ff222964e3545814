"""The two tables of the search space, joined on the *context* (tp, pp, vpp, cp, dp):

- `degree_table`: one row per (tp, pp, vpp, cp, dp, ep, etp, micro_batch_size);
- `switch_table`: for each context, every legal combination of the switches (sequence
  parallel, tp comm overlap, recompute with its layers and method, distributed optimizer
  or Megatron-FSDP with its sharding strategy, overlap flags, DDP bucket size), which
  depend on the degrees only through the context;
- `expand` joins them into one row per candidate plan.

The values come from the generators of `planner.knob_generators`; a knob fixed in the
`planner.space.SearchSpace` is taken as given. Columns follow `planner.space`'s
conventions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pandas as pd

from costmodel.plan_frame import DEFAULT_MODULES
from planner.knob_generators import (
    bucket_sizes,
    cp_degrees,
    ep_degrees,
    etp_degrees,
    layout_vpp_degrees,
    mamba_cp_degrees,
    megatron_fsdp_options,
    micro_batch_sizes,
    optimizer_options,
    pp_degrees,
    recompute_module_sets,
    recompute_options,
    sequence_parallel_options,
    split_choices,
    tp_degrees,
    vpp_degrees,
)
from planner.space import (
    CONTEXT_COLUMNS,
    DEGREE_COLUMNS,
    PLAN_COLUMNS,
    SWITCH_COLUMNS,
    SearchSpace,
    column_value,
)
from planner.splits import EVEN_SPLIT, SPLIT_COLUMNS
from specs.block_checks import is_parallel_block
from specs.job import TrainingJob
from specs.model import ModelSpec

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


# ---- the two tables ------------------------------------------------------------------------


def degree_table(
    model: ModelSpec,
    num_gpus: int,
    job: TrainingJob,
    space: SearchSpace,
    scale_up_domain: int,
) -> pd.DataFrame:
    """One row per combination of the degree generators (fixed knobs as given). A fixed ep
    that no etp fits beside on any stage (ep dividing neither the experts nor the ranks of
    a stage) would leave the table empty: its rows then take etp = tp, for the rules to
    name and fix."""
    rows = _degree_rows(model, num_gpus, job, space, scale_up_domain, keep_fixed_ep=False)
    if not rows and space.is_fixed("ep"):
        rows = _degree_rows(model, num_gpus, job, space, scale_up_domain, keep_fixed_ep=True)
    return pd.DataFrame(rows, columns=list(DEGREE_COLUMNS))


def _degree_rows(
    model: ModelSpec,
    num_gpus: int,
    job: TrainingJob,
    space: SearchSpace,
    scale_up_domain: int,
    *,
    keep_fixed_ep: bool,
) -> list[tuple[Any, ...]]:
    """The rows of `degree_table`; ``keep_fixed_ep`` as in `_expert_rows`."""
    wide = space.tp_beyond_scale_up
    rows = []
    kv = space.has("kv_sub_sharding")
    tps = space.choices(
        "tp",
        tp_degrees(model, num_gpus, scale_up_domain, beyond_scale_up=wide, kv_sub_sharding=kv),
    )
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
            # a fixed pp no split divides still gets its even-split row, for the rules to judge
            vpps = tuple(layout_vpp_degrees(space, pp, vpps)) or (1,)
            for vpp in space.choices("vpp", vpps):
                after_pp = max(1, after_tp // pp)
                cps = mamba_cp_degrees(
                    model,
                    tp,
                    cp_degrees(
                        job.seq_length,
                        after_pp,
                        space.min_tokens_per_cp_rank,
                        job.packed_document_tokens,
                    ),
                )
                if not space.has("context_parallel"):
                    cps = iter((1,))
                splits = split_choices(model, pp, vpp, space) or [EVEN_SPLIT]
                for cp in space.choices("cp", cps):
                    dp = space.choices("dp", (max(1, after_pp // cp),))[0]
                    context = (tp, pp, vpp, cp, dp)
                    expert = _expert_rows(
                        model, job, space, scale_up_domain, context, keep_fixed_ep=keep_fixed_ep
                    )
                    for row in expert:
                        rows += [(*row, *(split[k] for k in SPLIT_COLUMNS)) for split in splits]
    return rows


def _expert_rows(
    model: ModelSpec,
    job: TrainingJob,
    space: SearchSpace,
    scale_up_domain: int,
    context: tuple[int, int, int, int, int],
    *,
    keep_fixed_ep: bool = False,
) -> list[tuple[int, ...]]:
    """Degree rows of one context: every (ep, etp, micro_batch_size); with
    ``keep_fixed_ep`` a fixed ep that no etp fits beside takes etp = tp."""
    tp, _, _, cp, dp = context
    stage = tp * cp * dp
    wide = space.tp_beyond_scale_up
    mbs_values = space.choices(
        "micro_batch_size", micro_batch_sizes(job.global_batch_size, space.max_micro_batch_size)
    )
    rows = []
    for ep in space.choices("ep", ep_degrees(model, stage)):
        etps = tuple(
            etp_degrees(
                model,
                tp,
                ep,
                stage,
                scale_up_domain,
                beyond_scale_up=wide,
                any_size=space.any_expert_tp,
            )
        )
        if not etps and keep_fixed_ep and space.is_fixed("ep"):
            etps = (tp,)
        for etp in space.choices("etp", etps):
            rows += [(*context, ep, etp or tp, mbs) for mbs in mbs_values]
    return rows


def switch_rows(
    model: ModelSpec, job: TrainingJob, space: SearchSpace, context: Sequence[int]
) -> list[dict[str, Any]]:
    """Every legal switch combination for one context (tp, pp, vpp, cp, dp), as dicts."""
    tp, pp, vpp, cp, dp = (int(v) for v in context)
    chunk_layers = max(1, model.num_layers // (pp * vpp))
    required_sp = required_switches(model, tp, cp).get("sequence_parallel")
    seq_pairs = [
        {"sequence_parallel": s, "tp_comm_overlap": o}
        for s, o in sequence_parallel_options(tp, job.seq_length, cp)
        if (space.has("sequence_parallel") or not s) and (space.has("tp_comm_overlap") or not o)
        # specs.rules_block.parallel_block_not_with_tp_comm_overlap
        if not (o and is_parallel_block(model.layer_block))
        if required_sp in (None, s)
    ]
    # none is legal where the model requires SP that the tokens of a CP rank cannot take
    # (DeepSeek sparse attention at tp > 1, seq_length / cp not divisible by tp): the
    # required switch, so that check_plan names sequence_parallel_seq_divisible_by_tp
    seq_opts = _constrained(
        seq_pairs or [{"sequence_parallel": bool(required_sp), "tp_comm_overlap": False}], space
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
            and (space.full_recompute or r != "full")
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
    # DeepSeek sparse attention runs context parallelism only as an all-gather
    # (rule dsa_context_parallel_all_gather); every other model keeps the ring
    comm = "all_gather" if model.uses_dsa and cp > 1 else "p2p"
    fixed = {"cp_comm_type": space.choices("cp_comm_type", (comm,))[0]}
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
    fixed = {k: column_value(k, space.fixed[k]) for k in keys if k in space.fixed}
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


def required_switches(model: ModelSpec, tp: int, cp: int) -> dict[str, Any]:
    """Switch values a model requires at (tp, cp), which the neutral ones must yield to when
    a degree row is checked on its own: DeepSeek sparse attention runs tp > 1 only with
    sequence parallelism and cp > 1 only as an all-gather (`specs.rules_dsa`); none for
    other models."""
    if not model.uses_dsa:
        return {}
    required: dict[str, Any] = {}
    if tp > 1:
        required["sequence_parallel"] = True
    if cp > 1:
        required["cp_comm_type"] = "all_gather"
    return required
