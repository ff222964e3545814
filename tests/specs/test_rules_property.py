"""Property tests of `specs.rules`: over bounded random specs, `check_plan` never raises,
and a plan it accepts has a rank layout whose groups tile the world."""

from __future__ import annotations

from typing import Any

from hypothesis import find, given, settings
from hypothesis import strategies as st

from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.layout import RankLayout
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.rules import check_plan, rule_ids
from tests.specs.rule_specs import Specs


def _rarely(draw: st.DrawFn, usual: Any, odd: Any) -> Any:
    """``usual`` seven times in eight, else ``odd``: each field is rarely inconsistent, so
    a fair share of the drawn plans pass every rule."""
    return odd if draw(st.integers(0, 7)) == 0 else usual


@st.composite
def bundles(draw: st.DrawFn) -> Specs:
    """Bounded random specs, mostly consistent, each field sometimes off."""
    tp, pp = draw(st.sampled_from([1, 2, 3, 4])), draw(st.sampled_from([1, 2, 3, 4]))
    vpp, cp = draw(st.sampled_from([1, 1, 2, 3])), draw(st.sampled_from([1, 1, 2, 3]))
    dp, mbs = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    heads = tp * draw(st.integers(1, 4)) + _rarely(draw, 0, 1)
    experts = draw(st.sampled_from([0, 0, 4, 6, 8]))
    model = ModelSpec(
        name="random",
        num_layers=pp * vpp * draw(st.integers(1, 3)) + _rarely(draw, 0, 1),
        hidden_size=heads * 8,
        num_attention_heads=heads,
        num_query_groups=draw(st.sampled_from([None, 1, heads])),
        ffn_hidden_size=8 * tp * draw(st.integers(1, 8)) + _rarely(draw, 0, 1),
        vocab_size=1000,
        position_embedding=draw(st.sampled_from(["rope", "learned"])),
        max_position_embeddings=_rarely(draw, 1024, 64),
        num_experts=experts,
        moe_top_k=min(2, experts) if experts else 2,
        moe_ffn_hidden_size=draw(st.sampled_from([None, 48, 48, 50])),
        moe_shared_expert_size=draw(st.sampled_from([0, 96, 96, 97])),
        moe_layer_freq=draw(st.sampled_from([1, 2])),
    )
    job = TrainingJob(
        seq_length=2 * cp * tp * draw(st.integers(4, 24)) + _rarely(draw, 0, 2),
        global_batch_size=mbs * dp * pp * draw(st.integers(1, 4)) + _rarely(draw, 0, 1),
    )
    num_gpus = tp * pp * cp * dp + _rarely(draw, 0, 1)
    interleaved = _rarely(draw, vpp > 1, vpp == 1)
    sequence_parallel = _rarely(draw, tp > 1 and draw(st.booleans()), tp == 1)
    distributed_optimizer, overlap_grad_reduce = draw(st.booleans()), draw(st.booleans())
    plan = ParallelPlan(
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        dp=dp,
        ep=draw(st.sampled_from([1, 2, 4])) if experts else _rarely(draw, 1, 2),
        etp=draw(st.sampled_from([None, 1, 2])),
        micro_batch_size=mbs,
        schedule="interleaved" if interleaved else "1f1b",
        sequence_parallel=sequence_parallel,
        tp_comm_overlap=_rarely(draw, sequence_parallel and draw(st.booleans()), True),
        distributed_optimizer=distributed_optimizer,
        overlap_grad_reduce=overlap_grad_reduce,
        overlap_param_gather=_rarely(draw, distributed_optimizer and overlap_grad_reduce, True),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        recompute_num_layers=_rarely(draw, None, draw(st.sampled_from([1, 5]))),
    )
    return model, ClusterSpec(hardware="h100-sxm-80gb", num_gpus=num_gpus), job, plan


_LAYOUT_AXES = ("tp", "cp", "dp", "pp", "dp-cp", "tp-cp", "tp-dp-cp", "tp-pp", "ep", "etp", "edp")


@settings(max_examples=200, deadline=None)
@given(bundles())
def test_check_plan_never_raises_and_valid_plans_tile_the_world(specs: Specs) -> None:
    violations = check_plan(*specs)
    assert {v.rule for v in violations} <= set(rule_ids())
    assert all(v.message for v in violations)
    if violations:
        return
    _, cluster, _, plan = specs
    layout = RankLayout.from_plan(plan, world_size=cluster.num_gpus)
    for axes in _LAYOUT_AXES:
        groups = layout.groups(axes)
        assert sorted(r for g in groups for r in g) == list(range(cluster.num_gpus))
        assert {len(g) for g in groups} == {layout.group_size(axes)}


def test_random_bundles_reach_valid_plans() -> None:
    # Guards the property above against a strategy that never yields a valid plan.
    model, cluster, job, plan = find(bundles(), lambda specs: not check_plan(*specs))
    assert check_plan(model, cluster, job, plan) == []
