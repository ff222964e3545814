"""CUDA graph capture (`ExecutionOptions.cuda_graph_scopes`): captured scopes remove the
host launch time of their kernels from a MoE layer's host floor, and nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import CommGroups
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.moe_launches import (
    PREPROCESS_LAUNCHES,
    ROUTER_LAUNCHES,
    captured_moe_launches,
    moe_host_launches,
)
from costmodel.topology import strided_group_placement
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, MOE_LAYER, LayerKind
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
QWEN = get_preset("qwen3-30b-a3b")
PLAN = ParallelPlan(dp=8, ep=8)
SHORT = TrainingJob(seq_length=256, global_batch_size=64)  # host-bound MoE passes
LONG = TrainingJob(seq_length=16384, global_batch_size=64)  # kernel-bound MoE passes
LAUNCH_S = 50e-6


def cost(
    job: TrainingJob,
    scopes: frozenset[str],
    launch_s: float = LAUNCH_S,
    kind: LayerKind = MOE_LAYER,
):
    options = dataclasses.replace(
        DEFAULT_OPTIONS,
        moe_host_launch_s=launch_s,
        moe_expert_launch_s=launch_s,
        cuda_graph_scopes=scopes,
    )
    ep = strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)
    groups = CommGroups(ep=ep)
    return layer_cost(QWEN, job, PLAN, H100, kind=kind, groups=groups, options=options)


def test_router_and_preprocess_scopes_capture_their_launches_only():
    total = moe_host_launches(16, False, "forward")

    def captured(scopes: frozenset[str]) -> tuple[int, int]:
        share = captured_moe_launches(scopes, total)
        return share.python, share.expert

    assert captured(frozenset()) == (0, 0)
    assert captured(frozenset({"attn"})) == (0, 0)
    # The router's and the preprocessing's launches are Python-level; the per-expert GEMMs
    # run after the dispatch and stay eager.
    assert captured(frozenset({"moe_router"})) == (ROUTER_LAUNCHES, 0)
    both = frozenset({"moe_router", "moe_preprocess"})
    assert captured(both) == (ROUTER_LAUNCHES + PREPROCESS_LAUNCHES, 0)
    # Megatron-core accepts moe_preprocess only together with moe_router.
    assert captured(frozenset({"moe_preprocess"})) == (0, 0)
    for whole in ("moe", "layer", "full_iteration"):
        assert captured(frozenset({whole})) == (total.python, total.expert)


def test_captured_launches_leave_the_host_floor_of_a_host_bound_pass():
    scopes = frozenset({"attn", "moe_router", "moe_preprocess"})
    eager = cost(SHORT, frozenset())
    graphed = cost(SHORT, scopes)
    removed = (ROUTER_LAUNCHES + PREPROCESS_LAUNCHES) * LAUNCH_S
    assert graphed.backward.duration_s == pytest.approx(eager.backward.duration_s - removed)
    # The captured launches precede the dropless synchronization; the launches after it
    # still bind against the routed experts' kernels, so the forward saves at most them.
    assert eager.forward.duration_s - removed - 1e-12 <= graphed.forward.duration_s
    assert graphed.forward.duration_s < eager.forward.duration_s


def test_a_whole_layer_graph_prices_the_kernels_alone():
    kernels = cost(SHORT, frozenset(), launch_s=0.0)
    graphed = cost(SHORT, frozenset({"moe"}))
    assert graphed.forward.duration_s == pytest.approx(kernels.forward.duration_s)
    assert graphed.backward.duration_s == pytest.approx(kernels.backward.duration_s)


def test_graphs_change_nothing_when_kernels_outlast_the_launches():
    scopes = frozenset({"moe_router", "moe_preprocess"})
    assert cost(LONG, scopes).backward.duration_s == pytest.approx(
        cost(LONG, frozenset()).backward.duration_s
    )


def test_graphs_leave_dense_layers_unchanged():
    scopes = frozenset({"attn", "mlp"})
    dense = cost(SHORT, scopes, kind=DENSE_LAYER)
    assert dense.forward.duration_s == pytest.approx(
        cost(SHORT, frozenset(), kind=DENSE_LAYER).forward.duration_s
    )


def test_unknown_scope_is_rejected():
    with pytest.raises(SpecError, match="cuda_graph_scopes"):
        ExecutionOptions(cuda_graph_scopes=frozenset({"router"}))
