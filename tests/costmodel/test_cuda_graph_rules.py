"""Tests of `costmodel.cuda_graph_rules`: the CUDA graph assertions of Megatron-core's
``TransformerConfig.__post_init__`` against plans and models."""

from __future__ import annotations

import pytest

from costmodel.cuda_graph_rules import (
    cpu_offloading_problem,
    full_recompute_problem,
    model_scope_problem,
    moe_recompute_problem,
    per_layer_graphs,
    scope_set_problem,
)
from specs.plan import ParallelPlan
from specs.presets import get_preset

TE_MOE = frozenset({"attn", "moe_router", "moe_preprocess"})
WHOLE_STEP = frozenset({"full_iteration"})


def test_per_layer_graphs_are_every_scope_but_the_whole_step() -> None:
    assert per_layer_graphs(frozenset({"layer"})) and per_layer_graphs(TE_MOE)
    assert not per_layer_graphs(WHOLE_STEP) and not per_layer_graphs(frozenset())


@pytest.mark.parametrize(
    ("scopes", "needle"),
    [
        (frozenset({"moe", "moe_router"}), "exclude each other"),
        (frozenset({"attn", "moe_preprocess"}), "only with moe_router"),
    ],
)
def test_scope_sets_megatron_refuses(scopes: frozenset[str], needle: str) -> None:
    problem = scope_set_problem(scopes)
    assert problem is not None and needle in problem
    assert scope_set_problem(TE_MOE) is None


def test_full_recompute_only_under_the_whole_step_graph() -> None:
    full = ParallelPlan(recompute="full", recompute_num_layers=1)
    assert "full_iteration" in (full_recompute_problem(full, frozenset({"layer"})) or "")
    assert full_recompute_problem(full, WHOLE_STEP) is None
    assert full_recompute_problem(ParallelPlan(recompute="selective"), TE_MOE) is None


def test_moe_recompute_cannot_cover_a_captured_router() -> None:
    moe = ParallelPlan(recompute="selective", recompute_modules=("moe",))
    assert moe_recompute_problem(moe, TE_MOE) is not None
    assert moe_recompute_problem(moe, frozenset({"attn"})) is None
    act = ParallelPlan(recompute="selective", recompute_modules=("moe_act", "layernorm"))
    assert moe_recompute_problem(act, TE_MOE) is None


def test_layer_offloading_runs_without_per_layer_graphs() -> None:
    offload = ParallelPlan(cpu_offloading_num_layers=2)
    assert cpu_offloading_problem(offload, frozenset({"attn"})) is not None
    assert cpu_offloading_problem(offload, WHOLE_STEP) is None


def test_scopes_match_the_model() -> None:
    dense, all_moe = get_preset("llama3-8b"), get_preset("qwen3-30b-a3b")
    assert "dense" in (model_scope_problem(dense, TE_MOE) or "")
    assert "every layer" in (model_scope_problem(all_moe, frozenset({"mlp"})) or "")
    assert model_scope_problem(get_preset("deepseek-v3"), frozenset({"mlp"})) is None
    assert model_scope_problem(all_moe, TE_MOE) is None
