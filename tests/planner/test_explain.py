"""`planner.explain`: the knobs it names when it compares the winner with the runner-up."""

from __future__ import annotations

import dataclasses
import functools

from planner.explain import breakdown_lines, comparison_lines, explain, knob_differences
from planner.search import search_plans
from planner.space import SearchSpace
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

FEW = {"overlap_param_gather": False, "tp_comm_overlap": False, "ddp_bucket_size": None}


@functools.cache
def _best(model: str, tp: int):
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=512, global_batch_size=32)
    space = SearchSpace(fixed=FEW | {"tp": tp}, max_micro_batch_size=2)
    profile = load_profile("h100-sxm-80gb")
    return search_plans(get_preset(model), cluster, job, profile, space=space, top_k=2)


def _with_winner_and_runner_up_of_different_tp(model: str):
    """The tp=2 search's result with the best tp=1 plan as its runner-up."""
    result = _best(model, 2)
    other = _best(model, 1).top[0]
    return dataclasses.replace(result, top=(result.top[0], other))


def test_a_dense_model_has_no_expert_knobs_to_compare():
    text = explain(_with_winner_and_runner_up_of_different_tp("tiny"))
    knobs = next(line for line in text.splitlines() if line.strip().startswith("knobs:"))
    assert "tp " in knobs
    assert "etp" not in knobs and "ep " not in knobs


def test_a_moe_model_compares_its_expert_tensor_parallelism():
    a = ParallelPlan(tp=2, ep=2, dp=2)
    b = ParallelPlan(tp=1, ep=2, dp=4)
    assert "etp 2 vs 1" in knob_differences(a, b)
    assert "etp 2 vs 1" not in knob_differences(a, b, experts=False)
    assert "tp 2 vs 1" in knob_differences(a, b, experts=False)


def test_rounding_residues_of_the_schedule_print_as_zero():
    # A pipeline-free plan's bubble can come out of the schedule's sums as ~1e-14 s.
    result = _with_winner_and_runner_up_of_different_tp("tiny")

    def with_bubble(ranked, bubble_s):
        breakdown = dataclasses.replace(ranked.estimate.breakdown, bubble_s=bubble_s)
        return dataclasses.replace(
            ranked, estimate=dataclasses.replace(ranked.estimate, breakdown=breakdown)
        )

    winner = with_bubble(result.top[0], 8.88e-15)
    runner_up = with_bubble(result.top[1], result.top[1].estimate.iteration_time_s)
    assert "bubble" not in breakdown_lines(winner.estimate)[0]
    compared = comparison_lines(winner, runner_up)[0]
    assert "bubble 0 s vs" in compared and "e-15" not in compared


def test_a_simpler_winner_in_the_tie_band_is_not_said_to_beat_a_faster_runner_up():
    # The planner ranks the simpler of two plans within RANK_TOLERANCE first even when it
    # is predicted slower; the comparison must say so, not print a negative "beats by".
    result = _with_winner_and_runner_up_of_different_tp("tiny")
    winner, runner_up = result.top[0], result.top[1]
    slower = dataclasses.replace(
        winner.estimate, tokens_per_s=runner_up.estimate.tokens_per_s * 0.99
    )
    line = comparison_lines(dataclasses.replace(winner, estimate=slower), runner_up)[0]
    assert line.startswith("Ranks above the runner-up") and "1.0% fewer tokens/s" in line
    assert "by -" not in line
    faster = dataclasses.replace(
        winner.estimate, tokens_per_s=runner_up.estimate.tokens_per_s * 1.05
    )
    line = comparison_lines(dataclasses.replace(winner, estimate=faster), runner_up)[0]
    assert line.startswith("Beats the runner-up") and "by 5.0% tokens/s" in line
