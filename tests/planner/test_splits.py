"""Tests of `planner.splits`: the uneven split options the search tries."""

from __future__ import annotations

import pytest

from planner.knob_generators import pp_degrees
from planner.space import SearchSpace, plan_from_row, plan_knobs
from planner.space_tables import degree_table
from planner.splits import EVEN_SPLIT, balanced_layout, split_options
from specs.job import TrainingJob
from specs.pipeline_split import pipeline_split
from specs.plan import ParallelPlan
from specs.presets import get_preset


def test_llama3_405b_on_pp16_gets_one_uneven_split() -> None:
    # 126 layers: no even split on 16 stages; both account-for flags give 7, 8 x 14, 7,
    # the same layers as first/last 7, which is therefore not listed twice.
    model = get_preset("llama3.1-405b")
    options = split_options(model, 16, 1)
    assert len(options) == 1
    plan = plan_from_row(
        {"pp": 16, "vpp": 1, "tp": 8, "cp": 1, "dp": 128, "ep": 1, "etp": 8, "micro_batch_size": 1}
        | options[0],
        model,
    )
    split = pipeline_split(model, plan)
    assert [split.rank_num_layers(r) for r in range(16)] == [7] + [8] * 14 + [7]


def test_even_split_comes_first_and_uneven_balances_the_ends() -> None:
    model = get_preset("llama3-8b")  # 32 layers
    options = split_options(model, 4, 1)
    assert options[0] == EVEN_SPLIT
    first_last = [o for o in options if o["decoder_first_pipeline_num_layers"]]
    assert first_last and first_last[0]["decoder_first_pipeline_num_layers"] == 7  # 7, 9, 9, 7


def test_deepseek_v3_layout_is_the_published_one() -> None:
    # Megatron-Bridge's DeepSeek-V3 recipe on pp8 vpp4: Et|(tt|)*30mL.
    model = get_preset("deepseek-v3")
    layouts = [o["pipeline_model_parallel_layout"] for o in split_options(model, 8, 4)]
    assert "Et|(tt|)*30mL" in layouts
    assert balanced_layout(model, 8, 4) == "Et|(tt|)*30mL"


@pytest.mark.parametrize(("pp", "vpp"), [(2, 1), (4, 2), (8, 4), (16, 1), (5, 3)])
def test_every_option_is_a_valid_split(pp: int, vpp: int) -> None:
    for name in ("llama3.1-405b", "qwen3-235b-a22b", "deepseek-v3"):
        model = get_preset(name)
        for option in split_options(model, pp, vpp):
            plan = ParallelPlan(pp=pp, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b")
            row = plan_knobs(plan) | option
            split = pipeline_split(model, plan_from_row(row, model))
            assert sum(split.rank_num_layers(r) for r in range(pp)) == model.num_layers


def test_even_only_space_keeps_megatrons_default_split() -> None:
    model = get_preset("llama3.1-405b")
    assert list(pp_degrees(model, 2048, uneven=False)) == [1, 2]
    job = TrainingJob(seq_length=8192, global_batch_size=2048)
    table = degree_table(model, 64, job, SearchSpace(uneven_splits=False), 8)
    assert len(table) and set(table["pp"]) <= {1, 2}
    assert not table["account_for_embedding_in_pipeline_split"].any()
    assert (table["pipeline_model_parallel_layout"] == "").all()
