"""Tests of `planner.sizing`: the arithmetic of days, GPU-hours and cost; the ladder of
cluster sizes; the choice for each goal; monotone days as the cluster grows; the plot; the
time limit over a sizing run."""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from planner.sizing import (
    cluster_sizes,
    gpu_hours,
    size_cluster,
    sizing_time_limit_note,
    training_days,
)
from planner.sizing_plot import scaling_plot
from planner.space import SearchSpace
from profiles import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.presets import get_preset

H100 = "h100-sxm-80gb"
# A narrow space keeps each search well under a second; degrees stay searched.
NARROW = SearchSpace(
    fixed={
        "sequence_parallel": True,
        "tp_comm_overlap": False,
        "recompute": "selective",
        "distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "ddp_bucket_size": None,
        "vpp": 1,
    },
    max_micro_batch_size=2,
)


@functools.cache
def _profile():
    return load_profile(H100)


def _job(seq: int = 4096, batch: int = 256, tokens: int = 10**12) -> TrainingJob:
    return TrainingJob(seq_length=seq, global_batch_size=batch, token_budget=tokens)


def test_days_and_gpu_hours_arithmetic() -> None:
    # 1e12 tokens at 1e6 tokens/s is 1e6 s = 11.574 days; on 64 GPUs 17,778 GPU-hours
    assert training_days(1e12, 1e6) == pytest.approx(1e6 / 86_400)
    assert gpu_hours(64, training_days(1e12, 1e6)) == pytest.approx(64 * 1e6 / 3600)
    with pytest.raises(SpecError):
        training_days(1e12, 0.0)


def test_cluster_size_ladder() -> None:
    assert cluster_sizes(8, 1, 64) == [8, 16, 32, 64]
    assert cluster_sizes(8, 100, 1024) == [128, 256, 512, 1024]
    assert cluster_sizes(8, 1, 96) == [8, 16, 32, 64, 96]  # the limit itself, whole nodes
    assert cluster_sizes(4, 1, 30) == [4, 8, 16]  # 30 is not whole nodes of 4
    with pytest.raises(SpecError):
        cluster_sizes(0, 1, 8)


def test_max_gpus_picks_the_fastest() -> None:
    result = size_cluster(
        get_preset("llama3-8b"), H100, _job(), _profile(), max_gpus=64, space=NARROW, top_k=1
    )
    assert [r.num_gpus for r in result.rows] == [8, 16, 32, 64]
    assert result.chosen is not None
    assert result.chosen.days == min(r.days for r in result.rows)
    row = result.rows[0]
    assert row.days == pytest.approx(training_days(10**12, row.tokens_per_s))
    assert row.gpu_hours == pytest.approx(8 * row.days * 24)
    assert row.cost_usd is None


def test_deadline_picks_the_smallest_cluster_that_meets_it() -> None:
    model = get_preset("llama3-8b")
    reference = size_cluster(model, H100, _job(), _profile(), max_gpus=128, space=NARROW)
    deadline = reference.rows[2].days * 1.01  # met first at the third size (32 GPUs)
    result = size_cluster(
        model, H100, _job(), _profile(), days=deadline, space=NARROW, gpu_hour_usd=2.0
    )
    assert result.chosen is not None and result.chosen.num_gpus == 32
    assert all(r.days > deadline for r in result.rows if r.num_gpus < 32)
    assert len([r for r in result.rows if r.num_gpus > 32]) == 2  # two sizes past it
    assert result.cheapest is not None and result.cheapest.days <= deadline
    assert result.chosen.cost_usd == pytest.approx(result.chosen.gpu_hours * 2.0)


def test_budget_picks_the_fastest_within_budget() -> None:
    model = get_preset("llama3-8b")
    reference = size_cluster(
        model, H100, _job(), _profile(), max_gpus=64, space=NARROW, gpu_hour_usd=2.0
    )
    budget = max(r.cost_usd for r in reference.rows[:2]) * 1.001
    result = size_cluster(
        model, H100, _job(), _profile(), budget_usd=budget, gpu_hour_usd=2.0, space=NARROW
    )
    assert result.chosen is not None and result.chosen.cost_usd <= budget
    within = [r for r in result.rows if r.cost_usd is not None and r.cost_usd <= budget]
    assert result.chosen.days == min(r.days for r in within)


def test_goals_are_validated() -> None:
    model = get_preset("tiny")
    with pytest.raises(SpecError, match="goal"):
        size_cluster(model, H100, _job(), _profile())
    with pytest.raises(SpecError, match="price"):
        size_cluster(model, H100, _job(), _profile(), budget_usd=100.0)
    no_budget = TrainingJob(seq_length=512, global_batch_size=8)
    with pytest.raises(SpecError, match="token budget"):
        size_cluster(model, H100, no_budget, _profile(), days=1.0)


@pytest.mark.parametrize(
    "goal",
    [
        {"days": 0.0},
        {"days": float("nan")},
        {"max_gpus": 0},
        {"budget_usd": -1.0, "gpu_hour_usd": 2.0},
        {"days": 10.0, "gpus_per_node": 0},
    ],
)
def test_goals_out_of_range_are_refused(goal: dict[str, float]) -> None:
    # max_gpus=0 and gpus_per_node=0 once fell back silently to the defaults
    name = next(k for k, v in goal.items() if not v > 0)
    with pytest.raises(SpecError, match=f"cluster sizing: {name} must be > 0"):
        size_cluster(get_preset("tiny"), H100, _job(), _profile(), **goal)


def test_ladder_starts_where_the_model_state_fits() -> None:
    # llama3-70b: 70.6e9 params x 18 bytes = 1.27 TB > 8 x 76 GiB, so one node is skipped
    result = size_cluster(
        get_preset("llama3-70b"), H100, _job(), _profile(), max_gpus=16, space=NARROW, top_k=1
    )
    assert [r.num_gpus for r in result.rows] == [16]


@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    name=st.sampled_from(["llama3-8b", "llama2-13b"]),
    seq=st.sampled_from([2048, 4096]),
    batch=st.sampled_from([256, 512]),
)
def test_more_gpus_never_lengthen_the_days(name, seq, batch) -> None:
    """Along the ladder (whole nodes, doubling), the best plan's days never grow for models
    whose global batch leaves room for more data parallelism."""
    result = size_cluster(
        get_preset(name), H100, _job(seq, batch), _profile(), max_gpus=128, space=NARROW, top_k=1
    )
    days = [r.days for r in result.rows]
    assert len(days) >= 3
    assert all(later <= earlier * (1 + 1e-9) for earlier, later in itertools.pairwise(days))


def test_scaling_plot_writes_a_png(tmp_path) -> None:
    result = size_cluster(
        get_preset("llama3-8b"), H100, _job(), _profile(), max_gpus=32, space=NARROW, top_k=1
    )
    path = scaling_plot(result, tmp_path / "scaling.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class SizeClock:
    """A clock that advances ``step_s`` seconds when the sizing run moves to a new size, and
    ``search_step_s`` at every progress step of a size's search."""

    def __init__(self, step_s: float, search_step_s: float = 0.0) -> None:
        self.now = 0.0
        self.step_s, self.search_step_s = step_s, search_step_s
        self.sizes: list[int] = []

    def __call__(self) -> float:
        return self.now

    def progress(self, gpus: int, done: int, total: int) -> None:
        if not self.sizes or self.sizes[-1] != gpus:
            self.sizes.append(gpus)
            self.now += self.step_s
        else:
            self.now += self.search_step_s


def test_time_limit_is_split_over_the_sizes_and_stops_the_ladder() -> None:
    # 25 s over at most 4 sizes, 10 s per size: 25/4, then 15/3, then 5/2 s each; the
    # fourth size starts past the limit and is not searched
    clock = SizeClock(10.0)
    kw = {"max_gpus": 64, "space": NARROW, "top_k": 2}
    result = size_cluster(
        get_preset("llama3-8b"), H100, _job(), _profile(), **kw,
        time_limit_s=25.0, clock=clock, progress=clock.progress,
    )  # fmt: skip
    assert [r.num_gpus for r in result.rows] == [8, 16, 32]
    assert [r.time_limit_s for r in result.rows] == [6.25, 5.0, 2.5]
    assert result.not_searched == (64,) and result.time_limit_reached
    assert not any(r.time_limit_reached for r in result.rows)
    assert result.chosen is not None and result.chosen.num_gpus == 32  # fastest searched
    note = sizing_time_limit_note(result)
    assert "Time limit of 25 s reached over the sizing run" in note
    assert "searched 8, 16 and 32 GPUs; not searched: 64 GPUs" in note
    assert "cut short" not in note


def test_a_size_cut_short_is_named(monkeypatch) -> None:
    from planner import screening

    monkeypatch.setattr(screening, "FIRST_ROUND_ROWS", 1)  # one group per round
    clock = SizeClock(0.0, search_step_s=1.0)
    result = size_cluster(
        get_preset("llama3-8b"), H100, _job(), _profile(), max_gpus=64, space=NARROW,
        time_limit_s=4.0, clock=clock, progress=clock.progress,
    )  # fmt: skip
    first = result.rows[0]
    assert first.time_limit_reached and first.best is not None and first.time_limit_s == 1.0
    searched = [r.num_gpus for r in result.rows]
    assert searched + list(result.not_searched) == [8, 16, 32, 64] and result.not_searched
    assert "cut short: 8 GPUs (the plan of each is the best of the candidates its search" in (
        sizing_time_limit_note(result)
    )


def test_a_limit_not_reached_leaves_the_sizing_unchanged() -> None:
    kw = {"max_gpus": 32, "space": NARROW, "top_k": 1}
    model = get_preset("llama3-8b")
    plain = size_cluster(model, H100, _job(), _profile(), **kw)
    limited = size_cluster(model, H100, _job(), _profile(), **kw, time_limit_s=3600.0)
    assert [r.best.plan for r in limited.rows] == [r.best.plan for r in plain.rows]
    assert not limited.time_limit_reached and sizing_time_limit_note(limited) == ""


@pytest.mark.parametrize("limit", [0.0, -5.0, float("nan")])
def test_sizing_refuses_a_limit_that_is_not_positive(limit: float) -> None:
    with pytest.raises(SpecError, match=r"SearchPace.time_limit_s must be > 0 seconds"):
        size_cluster(get_preset("tiny"), H100, _job(), _profile(), days=1.0, time_limit_s=limit)


def test_a_deadline_met_leaves_only_the_sizes_past_it_to_share_the_limit() -> None:
    # the deadline is met at 8 GPUs: two sizes past it remain of the ladder's eight, so the
    # 16-GPU search gets the 5 s left over 2, and only 32 GPUs is left unsearched
    clock = SizeClock(10.0)
    result = size_cluster(
        get_preset("llama3-8b"), H100, _job(), _profile(), days=1e9, max_gpus=1024,
        space=NARROW, top_k=1, time_limit_s=15.0, clock=clock, progress=clock.progress,
    )  # fmt: skip
    assert [r.num_gpus for r in result.rows] == [8, 16]
    assert [r.time_limit_s for r in result.rows] == [15.0 / 8, 2.5]
    assert result.not_searched == (32,)
    assert result.chosen is not None and result.chosen.num_gpus == 8
