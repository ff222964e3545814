"""Tests of `specs.layout`: Megatron `tp-cp-ep-dp-pp` rank groups against goldens for 8 and
16 ranks, the rank formulas, and the partition property for random degrees."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specs.errors import SpecError
from specs.layout import DENSE_AXES, EXPERT_AXES, RankCoordinates, RankLayout
from specs.plan import ParallelPlan

Groups = tuple[tuple[int, ...], ...]


def _pairs(*firsts: int, step: int) -> Groups:
    return tuple((f, f + step) for f in firsts)


# megatron-facts.md §4.2 (a re-derivation of Megatron's RankGenerator):
# W=16, t=2, p=2, DP=4; experts e=4, et=1, so EDP = 16 / (1·4·2) = 2.
GOLDEN_16_EP = {
    "tp": _pairs(0, 2, 4, 6, 8, 10, 12, 14, step=1),
    "dp": ((0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)),
    "pp": _pairs(0, 1, 2, 3, 4, 5, 6, 7, step=8),
    "ep": ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)),
    "edp": _pairs(0, 1, 2, 3, 8, 9, 10, 11, step=4),
}
# megatron-facts.md §4.2, CP example: t=2, c=2, DP=2 (here with p=2, W=16).
GOLDEN_16_CP = {
    "cp": _pairs(0, 1, 4, 5, 8, 9, 12, 13, step=2),
    "dp": _pairs(0, 1, 2, 3, 8, 9, 10, 11, step=4),
    "dp-cp": ((0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)),
    "pp": _pairs(0, 1, 2, 3, 4, 5, 6, 7, step=8),
}
# Derived by hand: W=8, t=2, c=2, DP=1, p=2, so dense rank = tp_i + 2·cp_i + 4·pp_i;
# experts e=2, et=1, EDP = 8 / (1·2·2) = 2, so expert rank = ep_i + 2·edp_i + 4·pp_i.
GOLDEN_8_CP_EP = {
    "tp": ((0, 1), (2, 3), (4, 5), (6, 7)),
    "cp": ((0, 2), (1, 3), (4, 6), (5, 7)),
    "dp": ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)),
    "pp": ((0, 4), (1, 5), (2, 6), (3, 7)),
    "dp-cp": ((0, 2), (1, 3), (4, 6), (5, 7)),
    "tp-cp": ((0, 1, 2, 3), (4, 5, 6, 7)),
    "tp-dp-cp": ((0, 1, 2, 3), (4, 5, 6, 7)),
    "ep": ((0, 1), (2, 3), (4, 5), (6, 7)),
    "edp": ((0, 2), (1, 3), (4, 6), (5, 7)),
    "etp": ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)),
}
# Derived by hand: W=8, t=2, DP=2, p=2; experts et=2, e=2, EDP = 8 / (2·2·2) = 1, so
# expert rank = etp_i + 2·ep_i + 4·pp_i: EP pairs ranks two apart, ETP-EP spans a stage.
GOLDEN_8_ETP = {
    "tp": ((0, 1), (2, 3), (4, 5), (6, 7)),
    "dp": ((0, 2), (1, 3), (4, 6), (5, 7)),
    "etp": ((0, 1), (2, 3), (4, 5), (6, 7)),
    "ep": ((0, 2), (1, 3), (4, 6), (5, 7)),
    "etp-ep": ((0, 1, 2, 3), (4, 5, 6, 7)),
    "edp": ((0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)),
    "tp-pp": ((0, 1, 4, 5), (2, 3, 6, 7)),
}

GOLDENS = [
    pytest.param(RankLayout(tp=2, dp=4, pp=2, ep=4, etp=1), GOLDEN_16_EP, id="16-ep"),
    pytest.param(RankLayout(tp=2, cp=2, dp=2, pp=2), GOLDEN_16_CP, id="16-cp"),
    pytest.param(RankLayout(tp=2, cp=2, pp=2, ep=2, etp=1), GOLDEN_8_CP_EP, id="8-cp-ep"),
    pytest.param(RankLayout(tp=2, dp=2, pp=2, ep=2, etp=2), GOLDEN_8_ETP, id="8-etp"),
]


@pytest.mark.parametrize(("layout", "golden"), GOLDENS)
def test_golden_groups(layout: RankLayout, golden: dict[str, Groups]) -> None:
    for axes, groups in golden.items():
        assert layout.groups(axes) == groups, axes


def test_golden_coordinates_by_hand() -> None:
    layout = RankLayout(tp=2, cp=2, pp=2, ep=2, etp=1)
    assert layout.coordinates(6) == RankCoordinates(
        rank=6, tp=0, cp=1, dp=0, pp=1, etp=0, ep=0, edp=1
    )
    layout = RankLayout(tp=2, dp=2, pp=2, ep=2, etp=2)
    assert layout.coordinates(7) == RankCoordinates(
        rank=7, tp=1, cp=0, dp=1, pp=1, etp=1, ep=1, edp=0
    )


def test_docstring_example() -> None:
    layout = RankLayout(tp=2, dp=2, pp=2, ep=4, etp=1)
    assert layout.edp == 1
    assert layout.groups("tp-dp") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert layout.groups("ep") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert [layout.coordinates(r).ep for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_axis_order_in_the_name_does_not_matter() -> None:
    layout = RankLayout(tp=2, cp=2, dp=2, pp=2)
    assert layout.groups("dp-cp") == layout.groups("cp-dp")
    assert layout.groups("tp-dp-cp") == layout.groups("cp-tp-dp")


def test_from_plan_resolves_etp_and_checks_the_world() -> None:
    plan = ParallelPlan(tp=2, pp=2, dp=4, ep=4)
    layout = RankLayout.from_plan(plan, world_size=16)
    assert (layout.etp, layout.ep, layout.edp) == (2, 4, 1)  # etp None means tp
    with pytest.raises(SpecError, match=r"= 16 must equal world_size \(12\)"):
        RankLayout.from_plan(plan, world_size=12)


def test_expert_grid_that_does_not_tile_is_rejected() -> None:
    with pytest.raises(SpecError, match=r"etp \(2\) · ep \(4\) = 8 must divide .* = 4"):
        RankLayout.from_plan(ParallelPlan(tp=2, dp=2, ep=4))


@pytest.mark.parametrize("axes", ["", "tp-", "tp-tp", "tp-ep", "mp", "dp-edp"])
def test_unknown_axes_list_the_valid_names(axes: str) -> None:
    with pytest.raises(SpecError, match=r"dense \{tp, cp, dp, pp\} or expert \{etp, ep, edp, pp\}"):
        RankLayout(tp=2, dp=2).groups(axes)


@pytest.mark.parametrize("rank", [-1, 8, True])
def test_rank_out_of_range_is_rejected(rank: int) -> None:
    layout = RankLayout(tp=2, dp=2, pp=2)
    with pytest.raises(SpecError, match=r"\[0, 8\)"):
        layout.coordinates(rank)
    with pytest.raises(SpecError, match=r"\[0, 8\)"):
        layout.group_of(rank, "tp")


def test_non_positive_degree_is_rejected() -> None:
    with pytest.raises(SpecError, match=r"RankLayout\.cp"):
        RankLayout(cp=0)


# ---- properties over random degrees ------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn) -> RankLayout:
    tp, cp, dp, pp = (draw(st.integers(1, 4)) for _ in range(4))
    stage = tp * cp * dp
    etp = draw(st.sampled_from([d for d in range(1, stage + 1) if stage % d == 0]))
    ep = draw(st.sampled_from([d for d in range(1, stage // etp + 1) if stage // etp % d == 0]))
    return RankLayout(tp=tp, cp=cp, dp=dp, pp=pp, etp=etp, ep=ep)


def _all_axes() -> list[str]:
    """Every non-empty subset of each grid's axes, joined in rank order."""
    names = []
    for grid in (DENSE_AXES, EXPERT_AXES):
        for mask in range(1, 2 ** len(grid)):
            names.append("-".join(a for i, a in enumerate(grid) if mask >> i & 1))
    return sorted(set(names))


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_every_axis_partitions_the_world_into_equal_groups(layout: RankLayout) -> None:
    world = list(range(layout.world_size))
    for axes in _all_axes():
        groups = layout.groups(axes)
        assert sorted(r for g in groups for r in g) == world, axes
        assert {len(g) for g in groups} == {layout.group_size(axes)}, axes
        assert list(groups) == sorted(groups) and all(list(g) == sorted(g) for g in groups)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.data())
def test_coordinates_follow_megatron_rank_formulas(layout: RankLayout, data: st.DataObject) -> None:
    rank = data.draw(st.integers(0, layout.world_size - 1))
    c = layout.coordinates(rank)
    t, cp, dp, et, e, edp = layout.tp, layout.cp, layout.dp, layout.etp, layout.ep, layout.edp
    # megatron-facts.md §4.2: rank = tp_i + t·(cp_i + c·(dp_i + DP·pp_i)), and the expert
    # grid's rank = etp_i + et·(ep_i + e·(edp_i + EDP·pp_i)) with the same pp_i.
    assert rank == c.tp + t * (c.cp + cp * (c.dp + dp * c.pp))
    assert rank == c.etp + et * (c.ep + e * (c.edp + edp * c.pp))


@settings(max_examples=60, deadline=None)
@given(layouts(), st.data())
def test_group_of_is_the_group_of_ranks_differing_only_on_those_axes(
    layout: RankLayout, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, layout.world_size - 1))
    axes = data.draw(st.sampled_from(_all_axes()))
    group = layout.group_of(rank, axes)
    assert rank in group and group in layout.groups(axes)
    chosen = set(axes.split("-"))
    grid = DENSE_AXES if chosen <= set(DENSE_AXES) else EXPERT_AXES
    mine = layout.coordinates(rank)
    for other in group:
        theirs = layout.coordinates(other)
        assert all(getattr(theirs, a) == getattr(mine, a) for a in grid if a not in chosen)
