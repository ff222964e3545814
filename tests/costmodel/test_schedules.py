"""Invariants and goldens for the pipeline schedule generators (costmodel.schedules)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.schedules import (
    Action,
    flush_actions,
    interleaved,
    layer_range,
    max_in_flight,
    no_pipelining,
    one_f_one_b,
    pipeline_chunks,
    schedule_actions,
    stage_and_chunk,
    virtual_stage,
    warmup_microbatches_1f1b,
    warmup_microbatches_interleaved,
)
from specs.errors import SpecError


def _grid() -> list[tuple[int, int, int]]:
    """(pp, vpp, m) for pp 1..8, vpp 1..4 and microbatch counts each schedule accepts."""
    cases = []
    for pp in range(1, 9):
        for vpp in range(1, 5):
            if pp > 1 and vpp > 1:
                counts = {pp, 2 * pp, 3 * pp}
            else:
                counts = {1, max(pp - 1, 1), pp, pp + 1, 2 * pp + 3}
            cases += [(pp, vpp, m) for m in sorted(counts)]
    return cases


GRID = _grid()


def _warmup(pp: int, vpp: int, stage: int, m: int) -> int:
    if vpp == 1:
        return warmup_microbatches_1f1b(pp, stage, m)
    return warmup_microbatches_interleaved(pp, vpp, stage, m)


def _compact(actions: tuple[Action, ...], with_chunk: bool) -> str:
    if with_chunk:
        return " ".join(f"{a.phase}{a.microbatch}c{a.chunk}" for a in actions)
    return " ".join(f"{a.phase}{a.microbatch}" for a in actions)


@pytest.mark.parametrize(("pp", "vpp", "m"), GRID)
def test_each_chunk_microbatch_runs_once_forward_and_once_backward(pp, vpp, m):
    schedule = schedule_actions(pp, vpp, m)
    assert len(schedule) == pp
    expected = {(c, j) for c in range(vpp) for j in range(m)}
    for stage, actions in enumerate(schedule):
        assert all(a.stage == stage for a in actions)
        assert len(actions) == 2 * m * vpp
        forwards = [(a.chunk, a.microbatch) for a in actions if a.phase == "F"]
        backwards = [(a.chunk, a.microbatch) for a in actions if a.phase == "B"]
        assert len(forwards) == len(backwards) == m * vpp
        assert set(forwards) == set(backwards) == expected


@pytest.mark.parametrize(("pp", "vpp", "m"), GRID)
def test_backward_follows_its_forward_on_each_stage(pp, vpp, m):
    for actions in schedule_actions(pp, vpp, m):
        position = {(a.phase, a.chunk, a.microbatch): i for i, a in enumerate(actions)}
        for c in range(vpp):
            for j in range(m):
                assert position[("F", c, j)] < position[("B", c, j)]


@pytest.mark.parametrize(("pp", "vpp", "m"), [g for g in GRID if g[0] > 1])
def test_forwards_before_first_backward_match_megatron_warmup(pp, vpp, m):
    # Megatron runs `warmup` forwards, then the steady phase opens with one more forward.
    for stage, actions in enumerate(schedule_actions(pp, vpp, m)):
        leading = next(i for i, a in enumerate(actions) if a.phase == "B")
        assert leading == min(_warmup(pp, vpp, stage, m) + 1, m * vpp)


@pytest.mark.parametrize(("pp", "vpp", "m"), GRID)
def test_in_flight_microbatches_within_bound(pp, vpp, m):
    for stage, actions in enumerate(schedule_actions(pp, vpp, m)):
        held = max_in_flight(actions)
        if pp == 1:
            assert held == vpp  # one microbatch through every chunk
        elif vpp == 1:
            assert held <= pp - stage  # Megatron §3.2: rank r holds at most p - r
            assert held == min(pp - stage, m)
        else:
            assert held == min(_warmup(pp, vpp, stage, m) + 1, m * vpp)


@pytest.mark.parametrize(
    ("pp", "stage", "m", "expected"),
    [(4, 0, 8, 3), (4, 3, 8, 0), (4, 1, 1, 1), (8, 2, 16, 5), (1, 0, 3, 0)],
)
def test_warmup_1f1b_golden(pp, stage, m, expected):
    # min(p - r - 1, m), Megatron-LM forward_backward_pipelining_without_interleaving.
    assert warmup_microbatches_1f1b(pp, stage, m) == expected


@pytest.mark.parametrize(
    ("pp", "vpp", "stage", "m", "expected"),
    [(4, 2, 0, 8, 10), (4, 2, 3, 8, 4), (2, 2, 0, 2, 4), (2, 4, 1, 2, 6), (8, 3, 7, 8, 16)],
)
def test_warmup_interleaved_golden(pp, vpp, stage, m, expected):
    # min(2(p - r - 1) + (v - 1)·p, m·v), Megatron-LM get_pp_rank_microbatches with N = p.
    assert warmup_microbatches_interleaved(pp, vpp, stage, m) == expected


def test_one_f_one_b_golden_order():
    # Hand-derived from Megatron's 1F1B: p=4, m=6; rank 0 warms up 3, rank 3 none.
    schedule = one_f_one_b(4, 6)
    assert _compact(schedule[0], False) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5"
    assert _compact(schedule[2], False) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5"
    assert _compact(schedule[3], False) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"


def test_interleaved_golden_order():
    # Hand-derived from Megatron's schedule table for p=2, v=2, m=4: groups of 2
    # microbatches per chunk; backward chunk = v - 1 - forward chunk; warmup 4 and 2.
    schedule = interleaved(2, 2, 4)
    assert _compact(schedule[0], True) == (
        "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 B2c0 B3c0"
    )
    assert _compact(schedule[1], True) == (
        "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0"
    )


def test_no_pipelining_runs_each_microbatch_to_completion():
    assert _compact(no_pipelining(1, 3)[0], False) == "F0 B0 F1 B1 F2 B2"
    assert _compact(schedule_actions(1, 2, 2)[0], True) == (
        "F0c0 F0c1 B0c1 B0c0 F1c0 F1c1 B1c1 B1c0"
    )


def test_schedule_actions_dispatches_like_megatron():
    assert schedule_actions(4, 1, 8) == one_f_one_b(4, 8)
    assert schedule_actions(4, 2, 8) == interleaved(4, 2, 8)
    assert schedule_actions(1, 1, 5) == no_pipelining(1, 5)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 6), (4, 2, 2), (4, 3, 10), (8, 2, 12)])
def test_interleaved_rejects_microbatches_not_multiple_of_pp(pp, vpp, m):
    with pytest.raises(SpecError, match="interleaved_needs_microbatches_multiple_of_pp"):
        interleaved(pp, vpp, m)
    with pytest.raises(SpecError, match="interleaved_needs_microbatches_multiple_of_pp"):
        schedule_actions(pp, vpp, m)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(0, 1, 4), (2, 0, 4), (2, 1, 0), (-1, 2, 4)])
def test_non_positive_sizes_raise(pp, vpp, m):
    with pytest.raises(SpecError, match=">= 1"):
        schedule_actions(pp, vpp, m)


def test_one_f_one_b_accepts_any_microbatch_count():
    # 1F1B has no m % p rule in Megatron; m < p just shortens every warmup.
    schedule = one_f_one_b(4, 3)
    assert [max_in_flight(s) for s in schedule] == [3, 3, 2, 1]


@pytest.mark.parametrize(("pp", "vpp"), [(1, 1), (2, 3), (4, 2), (8, 4)])
def test_virtual_stage_round_trip(pp, vpp):
    seen = set()
    for stage in range(pp):
        for chunk in range(vpp):
            v = virtual_stage(stage, chunk, pp)
            assert stage_and_chunk(v, pp) == (stage, chunk)
            seen.add(v)
    assert seen == set(range(pp * vpp))


def test_layer_range_golden_and_cover():
    # Megatron initialize_model_parallel docstring: p=2, v=2, L=8 -> rank 1 chunk 1 = vs 3.
    assert layer_range(1, 1, pp=2, vpp=2, num_layers=8) == range(6, 8)
    assert layer_range(0, 1, pp=2, vpp=2, num_layers=8) == range(4, 6)
    layers = [
        layer
        for stage in range(4)
        for chunk in range(3)
        for layer in layer_range(stage, chunk, pp=4, vpp=3, num_layers=24)
    ]
    assert sorted(layers) == list(range(24))


def test_layer_range_rejects_uneven_split():
    with pytest.raises(SpecError, match="layers_divisible_by_pp_vpp"):
        layer_range(0, 0, pp=4, vpp=2, num_layers=30)


def test_action_is_frozen():
    action = Action(stage=0, chunk=0, microbatch=0, phase="F")
    with pytest.raises(dataclasses.FrozenInstanceError):
        action.stage = 1  # type: ignore[misc]


@pytest.mark.parametrize(("pp", "vpp"), [(1, 1), (2, 1), (2, 2), (4, 3)])
def test_pipeline_chunks_cover_every_layer_once_in_virtual_order(pp: int, vpp: int) -> None:
    num_layers = 24
    grid = pipeline_chunks(pp=pp, vpp=vpp, num_layers=num_layers)
    assert len(grid) == pp and all(len(row) == vpp for row in grid)
    by_virtual = sorted((virtual_stage(at.stage, at.chunk, pp), at) for row in grid for at in row)
    layers = [i for _, at in by_virtual for i in at.layers]
    assert layers == list(range(num_layers))
    firsts = [at for row in grid for at in row if at.first]
    lasts = [at for row in grid for at in row if at.last]
    assert [(a.stage, a.chunk) for a in firsts] == [(0, 0)]
    assert [(a.stage, a.chunk) for a in lasts] == [(pp - 1, vpp - 1)]
    for row in grid:
        for at in row:
            expected = layer_range(at.stage, at.chunk, pp=pp, vpp=vpp, num_layers=num_layers)
            assert at.layers == expected


def test_flush_actions_are_each_stages_warmup_forwards_and_cooldown_backwards():
    # pp=2, vpp=2, m=2: stage 0 warms up with min(2·1 + 1·2, 4) = 4 forwards (all of
    # them), stage 1 with min(0 + 2, 4) = 2 (Megatron get_pp_rank_microbatches).
    schedule = interleaved(2, 2, 2)
    flush = flush_actions(schedule, 2, 2, 2)
    assert flush[:8] == schedule[0]
    stage1 = schedule[1]
    assert flush[8:] == stage1[:2] + stage1[-2:]
    assert all(a.phase == "F" for a in stage1[:2]) and all(a.phase == "B" for a in stage1[-2:])
    assert set(stage1[2:-2]).isdisjoint(flush)
