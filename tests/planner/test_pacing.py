"""`planner.pacing` and the search's rounds: the screen reports its progress as it goes on
both runtimes, the round sizes leave the result unchanged, and a time limit stops the
screen, says so, and ranks the best of the candidates priced."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from costmodel.execution_presets import runtime_options
from planner import micro_batch_screen, screening
from planner.explain import explain, no_plan_reason, runner_up_of
from planner.pacing import (
    MIN_PACED_ROUND_ROWS,
    SIMULATED_PAST_LIMIT,
    SearchPace,
    next_chunk_rows,
    next_round_rows,
)
from planner.ranking import RANK_TOLERANCE
from planner.search import search_plans
from planner.search_result import TIME_LIMIT_REJECTION, SearchResult
from planner.space import SearchSpace
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.presets import get_preset

H100 = "h100-sxm-80gb"
# Fixing a few switches keeps the torch runtime's screen to a few hundred candidates.
FEW = SearchSpace(
    fixed={"overlap_param_gather": False, "tp_comm_overlap": False, "ddp_bucket_size": 0},
    max_micro_batch_size=2,
)


@functools.cache
def _profile():
    return load_profile(H100)


def _search(runtime: str = "torch", **kw) -> SearchResult:
    """The tiny model on 4 GPUs, in `FEW`."""
    return search_plans(
        get_preset("tiny"),
        ClusterSpec(hardware=H100, num_gpus=4),
        TrainingJob(seq_length=512, global_batch_size=8),
        _profile(),
        space=FEW,
        top_k=3,
        options=runtime_options(runtime),
        **kw,
    )


def _moe_search(**kw) -> SearchResult:
    """tiny-moe on 8 GPUs on the megatron runtime: enough groups for several rounds."""
    return search_plans(
        get_preset("tiny-moe"),
        ClusterSpec(hardware=H100, num_gpus=8),
        TrainingJob(seq_length=512, global_batch_size=32),
        _profile(),
        **{"top_k": 3, **kw},
    )


class TickClock:
    """A clock that advances one second at every progress report of the screen."""

    def __init__(self) -> None:
        self.now = 0.0
        self.screen: list[tuple[int, int]] = []

    def __call__(self) -> float:
        return self.now

    def progress(self, phase: str, done: int, total: int) -> None:
        if phase == "screen":
            self.screen.append((done, total))
            self.now += 1.0


def test_torch_screen_reports_increasing_counts(monkeypatch) -> None:
    """The old screen reported ("screen", 0, N) once and nothing until the simulator."""
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", MIN_PACED_ROUND_ROWS)
    reports: list[tuple[str, int, int]] = []
    result = _search(progress=lambda *r: reports.append(r))
    screen = [(done, total) for phase, done, total in reports if phase == "screen"]
    counts = [done for done, _ in screen]
    assert len(set(counts)) >= 4  # several rounds, each reported once
    assert counts == sorted(counts) and counts[0] == 0
    assert screen[-1][0] == screen[-1][1] == result.num_valid  # every candidate dealt with
    last_screen = max(i for i, r in enumerate(reports) if r[0] == "screen")
    assert all(r[0] == "simulate" for r in reports[last_screen + 1 :])


def test_megatron_screen_reports_its_rounds(monkeypatch) -> None:
    monkeypatch.setattr(screening, "FIRST_ROUND_ROWS", 50)
    reports: list[tuple[str, int, int]] = []
    result = _moe_search(progress=lambda *r: reports.append(r))
    counts = [done for phase, done, _ in reports if phase == "screen"]
    assert len(set(counts)) >= 3 and counts == sorted(counts)
    assert counts[-1] == result.num_valid


def test_round_sizes_leave_the_torch_result_unchanged(monkeypatch) -> None:
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", 10**6)
    whole = _search()
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", MIN_PACED_ROUND_ROWS)
    monkeypatch.setattr(screening, "next_round_rows", lambda rows, elapsed_s: 1)
    rounds = _search()
    assert [r.plan for r in rounds.top] == [r.plan for r in whole.top]
    assert rounds.num_screened == whole.num_screened and not rounds.time_limit_reached


def _assert_best_of_priced(result: SearchResult) -> None:
    """Every ranked plan was screened, and none of the screened fitting candidates is
    faster than the best beyond the ranking's tolerance (the torch screen is the
    simulator's figure)."""
    frame = result.candidates
    priced = frame[frame["tokens_per_s"].notna() & (frame["rejected_by"] == "")]
    labels = set(priced.apply(lambda row: (row["tp"], row["pp"], row["micro_batch_size"]), 1))
    for ranked in result.top:
        assert (ranked.plan.tp, ranked.plan.pp, ranked.plan.micro_batch_size) in labels
    assert result.best is not None
    best = result.best.estimate.tokens_per_s
    assert priced["tokens_per_s"].max() <= best * (1 + RANK_TOLERANCE) + 1e-9


def test_time_limit_stops_the_screen_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", MIN_PACED_ROUND_ROWS)
    monkeypatch.setattr(screening, "next_round_rows", lambda rows, elapsed_s: 1)
    clock = TickClock()
    result = _search(time_limit_s=3.0, clock=clock, progress=clock.progress)
    assert result.time_limit_reached and result.time_limit_s == 3.0
    assert 0 < result.num_unvisited < result.num_valid
    frame = result.candidates
    assert int((frame["rejected_by"] == TIME_LIMIT_REJECTION).sum()) == result.num_unvisited
    assert frame.loc[frame["rejected_by"] == TIME_LIMIT_REJECTION, "tokens_per_s"].isna().all()
    # dealt with: priced, over the memory floor or left by the limit; none counted twice
    memory = result.rejected.get("memory", 0)
    assert result.num_screened + result.num_unvisited + memory >= result.num_valid
    assert clock.screen[-1][0] < clock.screen[-1][1]  # the progress stopped short
    _assert_best_of_priced(result)
    text = explain(result)
    assert (
        f"Time limit of 3 s reached: {result.num_screened:,} of {result.num_valid:,} valid "
        f"candidates screened, {result.num_unvisited:,} not reached"
    ) in text
    assert "best of those screened, not of the whole space" in text


def test_a_limit_passed_still_simulates_a_runner_up(monkeypatch) -> None:
    """The limit has passed when the simulation starts: the first picks are simulated until
    fitting plans of `SIMULATED_PAST_LIMIT` labels have been, the rest are cut, and the
    explanation compares the best with a runner-up of another label and counts them."""
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", MIN_PACED_ROUND_ROWS)
    monkeypatch.setattr(screening, "next_round_rows", lambda rows, elapsed_s: 1)
    clock = TickClock()
    result = _search(time_limit_s=3.0, clock=clock, progress=clock.progress)
    picked = result.num_simulated + result.num_unsimulated
    assert result.num_unvisited > 0 and picked == 3  # top_k picks, the screen cut too
    assert len({r.plan.label() for r in result.top}) == SIMULATED_PAST_LIMIT
    assert len(result.top) == result.num_simulated < picked
    # the simulated ones are the first picks: the highest screened throughput
    frame = result.candidates
    fitting = frame[frame["fits"] & frame["tokens_per_s"].notna()]
    simulated = fitting[fitting["simulated_tokens_per_s"].notna()]
    first = fitting["tokens_per_s"].drop_duplicates().nlargest(result.num_simulated)
    assert sorted(simulated["tokens_per_s"]) == sorted(first)
    runner_up = runner_up_of(result)
    assert runner_up is not None and runner_up.plan.label() != result.best.plan.label()
    text = explain(result)
    assert f"the runner-up ({runner_up.plan.label()})" in text
    assert (
        f"{result.num_simulated} of the 3 plans picked for simulation simulated, the other "
        f"{result.num_unsimulated} cut by the limit"
    ) in text


def test_a_limit_not_reached_changes_nothing() -> None:
    result = _search(time_limit_s=3600.0)
    plain = _search()
    assert not result.time_limit_reached and result.num_unvisited == 0
    assert [r.plan for r in result.top] == [r.plan for r in plain.top]
    assert "Time limit" not in explain(result)


def test_a_tiny_limit_screens_one_round_on_megatron(monkeypatch) -> None:
    # one group per round, and more picks than the first group holds: the bound alone
    # does not end the screen after it
    monkeypatch.setattr(screening, "FIRST_ROUND_ROWS", 1)
    result = _moe_search(time_limit_s=1e-9, top_k=50)
    full = _moe_search(top_k=50)
    assert result.time_limit_reached and result.num_unvisited > 0
    assert result.num_screened < full.num_screened
    assert result.best is not None
    assert len({r.plan.label() for r in result.top}) == SIMULATED_PAST_LIMIT
    unvisited = result.candidates["rejected_by"] == TIME_LIMIT_REJECTION
    assert int(unvisited.sum()) == result.num_unvisited


def test_nothing_priced_that_fits_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", MIN_PACED_ROUND_ROWS)
    monkeypatch.setattr(screening, "next_round_rows", lambda rows, elapsed_s: 1)
    clock = TickClock()
    cut = _search(time_limit_s=2.0, clock=clock, progress=clock.progress)
    none = dataclasses.replace(cut, best=None, top=())
    reason = no_plan_reason(none)
    assert reason.startswith("No plan found within the time limit of 2 s: none of the ")
    assert f"{cut.num_screened:,} candidates screened (of {cut.num_valid:,} valid)" in reason
    assert "raise the time limit, or fix knobs to narrow the space" in reason


def test_pace_refuses_a_limit_that_is_not_positive() -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(SpecError, match=r"SearchPace.time_limit_s must be > 0 seconds"):
            SearchPace(time_limit_s=bad)


def test_round_rows_follow_the_rate() -> None:
    assert next_round_rows(100, 0.5) == 200  # twice as fast as the target
    assert next_round_rows(100, 0.01) == 400  # at most four times the last round
    assert next_round_rows(100, 100.0) == MIN_PACED_ROUND_ROWS
    assert next_round_rows(100, 0.0) == 400


def test_a_limit_reached_after_the_screen_says_what_was_left() -> None:
    """A limit that passes during the simulation leaves the screen whole: the note says
    only picks were left (the counts set by hand, as the simulation of `FEW` is quick)."""
    whole = dataclasses.replace(_search(), time_limit_s=5.0, num_simulated=2, num_unsimulated=3)
    note = explain(whole)
    assert (
        "Time limit of 5 s reached after the screen: 2 of the 5 plans picked for simulation "
        "simulated, the other 3 cut by the limit; the plans ranked are the best of those "
        "simulated"
    ) in note
    assert "best of those simulated" in note and "not reached" not in note


def test_torch_screen_reports_within_a_round(monkeypatch) -> None:
    # one round of every candidate: the count moved only at its end, so a round of slow
    # rows (a 70B model on 512 GPUs: 0.1 to 1 s a row) showed the same count for a minute
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", 10**6)
    monkeypatch.setattr(micro_batch_screen, "next_chunk_rows", lambda rows, elapsed_s: 4)
    reports: list[tuple[str, int, int]] = []
    result = _search(progress=lambda *r: reports.append(r))
    screen = [(done, total) for phase, done, total in reports if phase == "screen"]
    counts = [done for done, _ in screen]
    assert len(set(counts)) > 10 and counts == sorted(counts)
    assert all(done <= total for done, total in screen)
    assert screen[-1][0] == screen[-1][1] == result.num_valid


def test_chunks_of_a_round_leave_the_torch_result_unchanged(monkeypatch) -> None:
    monkeypatch.setattr(screening, "FIRST_PACED_ROUND_ROWS", 10**6)
    monkeypatch.setattr(screening, "MIN_PACED_ROUND_ROWS", 10**6)
    whole = _search()
    monkeypatch.setattr(screening, "MIN_PACED_ROUND_ROWS", 1)
    monkeypatch.setattr(micro_batch_screen, "next_chunk_rows", lambda rows, elapsed_s: 3)
    chunked = _search()
    assert [r.plan for r in chunked.top] == [r.plan for r in whole.top]
    columns = ["iteration_time_s", "peak_memory_bytes"]
    assert chunked.candidates[columns].equals(whole.candidates[columns])


def test_chunk_rows_follow_the_rate() -> None:
    assert next_chunk_rows(16, 2.0) == 8  # 8 rows a second
    assert next_chunk_rows(16, 0.01) == 64  # at most four times the last
    assert next_chunk_rows(1, 30.0) == 1  # at least one row
