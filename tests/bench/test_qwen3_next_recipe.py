"""bench/qwen3_next_recipe.py: Megatron-Bridge's Qwen3-Next recipe (v0.6.0
``recipes/qwen/h100/qwen3_next.py`` on ``recipes/common.py`` ``_pretrain_common``) as the
plan, job and options it prices."""

from __future__ import annotations

from tests.bench.bench_loader import load_bench

recipe = load_bench("qwen3_next_recipe")


def test_the_recipe_plan() -> None:
    plan = recipe.recipe_plan()
    # TP=1, PP=4, EP=8, ETP=1 on 32 GPUs; micro-batch 2 of _pretrain_common
    assert (plan.tp, plan.pp, plan.ep, plan.dp, plan.etp) == (1, 4, 8, 8, 1)
    assert plan.micro_batch_size == 2 and plan.vpp == 1 and not plan.sequence_parallel
    assert plan.recompute_modules == ("layernorm", "moe", "moe_act")
    assert plan.distributed_optimizer and plan.overlap_grad_reduce and plan.overlap_param_gather
    assert recipe.RECIPE_OPTIONS.moe_dispatcher == "flex"  # DeepEP on Hopper


def test_recompute_trades_time_for_memory() -> None:
    model = recipe.get_preset("qwen3-next-80b-a3b")
    with_rc = recipe.price(model, recipe.recipe_plan())
    without = recipe.price(model, recipe.recipe_plan(recompute=False))
    assert with_rc.peak_memory_gib < without.peak_memory_gib
    assert with_rc.iteration_time_s > without.iteration_time_s
    assert 0 < with_rc.mfu < 1 and with_rc.fits
