"""The row case (`published_rows.RowCase`) of a search sanity recipe (`search_sanity.py`)
as priced and as searched.

- `with_recipe_vpp`: the recipe on the interleaved schedule at a given virtual pipeline
  degree, for the ``--recipe-vpp`` question (what the claim would be had a recipe
  published without interleaving interleaved);
- `recipe_features` and `searched_case`: the plan features the recipe's software ran, so
  that the search may use them too (`ExecutionOptions.plan_features` steers the search
  only; no price reads it).
"""

from __future__ import annotations

import dataclasses

from published_rows import RowCase

from specs.plan import ParallelPlan


def with_recipe_vpp(case: RowCase, vpp: int) -> RowCase:
    """``case`` with its recipe on the interleaved schedule at ``vpp`` model chunks per
    pipeline rank, when it is pipelined and published without interleaving; else as is."""
    plan = case.plan
    if vpp <= 1 or plan.pp == 1 or plan.vpp > 1:
        return case
    return dataclasses.replace(
        case, plan=dataclasses.replace(plan, vpp=vpp, schedule="interleaved")
    )


def recipe_features(plan: ParallelPlan) -> frozenset[str]:
    """The plan features (`costmodel.execution_rules.PLAN_FEATURES`) that ``plan`` uses, but
    ``ddp_bucket_size``: a recipe's bucket is its framework's fixed default (PyTorch DDP's
    25 MB on the SC21 rows), not a searched ``--ddp-bucket-size``."""
    used = {
        "sequence_parallel": plan.sequence_parallel,
        "tp_comm_overlap": plan.tp_comm_overlap,
        "selective_recompute": plan.recompute == "selective",
        "recompute_modules": plan.recompute == "selective" and plan.recompute_modules is not None,
        "context_parallel": plan.cp > 1,
        "distributed_optimizer": plan.distributed_optimizer,
        "uneven_pipeline_split": plan.has_uneven_split,
        "interleaved_two_stages": plan.pp == 2 and plan.vpp > 1,
        "pipelined_grad_overlap": plan.overlap_grad_reduce and plan.pp > 1,
        "megatron_fsdp": plan.use_megatron_fsdp,
    }
    return frozenset(name for name, on in used.items() if on)


def searched_case(case: RowCase) -> RowCase:
    """``case`` with the plan features of its options widened by those its recipe uses
    (`recipe_features`), so that the search may use what the recipe's software ran: BLOOM's
    Megatron-DeepSpeed is priced as Megatron-LM 2021 (no distributed optimizer, even
    splits) but ran ZeRO-1 and an embedding-aware split. Plan features steer the search
    only; no price reads them (`ExecutionOptions.plan_features`)."""
    features = case.options.plan_features | recipe_features(case.plan)
    if features == case.options.plan_features:
        return case
    options = dataclasses.replace(case.options, plan_features=features)
    return dataclasses.replace(case, options=options)
