"""Tests of the memory savers in the plan search: per-module selective recompute sets are
tried where memory binds and found where only they fit; pinned savers are kept in every
candidate; every plan the search returns passes the saver rules (`specs.rules_savers`)."""

from __future__ import annotations

import functools

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from costmodel.estimate import estimate_plan
from planner.knob_generators import recompute_module_sets
from planner.search import search_plans
from planner.space import SearchSpace, plan_from_row
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.presets import get_preset
from specs.rules import check_plan
from specs.rules_savers import SAVER_RULES

H100 = "h100-sxm-80gb"
# Mixtral 8x7B on 16 H100 at 8K tokens with tp1 pp2 ep8 cp2 and selective recompute: the
# attention core alone frees too little (flash attention keeps no score matrix), so only a
# set that also frees the MoE block's activations fits in 80 GB.
MIXTRAL_BOUND = {"recompute": "selective", "tp": 1, "pp": 2, "ep": 8, "cp": 2}


@functools.cache
def _profile():
    return load_profile(H100)


def _search(model: str, gpus: int, seq: int, batch: int, space: SearchSpace, top_k: int = 3):
    cluster = ClusterSpec(hardware=H100, num_gpus=gpus)
    job = TrainingJob(seq_length=seq, global_batch_size=batch)
    return search_plans(get_preset(model), cluster, job, _profile(), space=space, top_k=top_k)


def test_sets_are_offered_only_where_every_module_exists() -> None:
    space = SearchSpace()
    assert recompute_module_sets(get_preset("llama3-8b"), space) == ()  # core_attn: default
    assert recompute_module_sets(get_preset("mixtral-8x7b"), space) == (
        "layernorm,moe_act",
        "core_attn,layernorm,moe_act",
        "moe",
    )
    assert "mla_up_proj" in recompute_module_sets(get_preset("deepseek-v3"), space)
    pinned = SearchSpace(fixed={"recompute_modules": ("mlp",)})
    assert recompute_module_sets(get_preset("llama3-8b"), pinned) == ("mlp",)


def test_a_plan_that_fits_only_with_a_module_set_is_found() -> None:
    without = _search(
        "mixtral-8x7b", 16, 8192, 64, SearchSpace(fixed=MIXTRAL_BOUND, recompute_module_sets=())
    )
    assert without.best is None  # fmt: skip
    found = _search("mixtral-8x7b", 16, 8192, 64, SearchSpace(fixed=MIXTRAL_BOUND))
    assert found.best is not None
    plan = found.best.plan
    assert plan.recompute == "selective" and plan.recompute_modules not in (None, ("core_attn",))
    assert check_plan(found.model, found.cluster, found.job, plan) == []
    est = estimate_plan(found.model, found.cluster, found.job, plan, _profile())
    assert est.peak_memory_bytes <= found.memory_limit_bytes
    # the same plan with Megatron's default modules does not fit
    default = plan.replace(recompute_modules=None)
    est = estimate_plan(found.model, found.cluster, found.job, default, _profile())
    assert est.peak_memory_bytes > found.memory_limit_bytes


def test_sets_are_tried_only_where_the_plan_without_recompute_does_not_fit() -> None:
    fits = _search("tiny-moe", 8, 512, 32, SearchSpace(max_micro_batch_size=2))
    assert (fits.candidates["recompute_modules"].fillna("") == "").all()
    bound = _search("mixtral-8x7b", 16, 8192, 64, SearchSpace(fixed=MIXTRAL_BOUND))
    frame = bound.candidates[bound.candidates["recompute_modules"].fillna("") != ""]
    assert len(frame) and (frame["recompute"] == "selective").all()


@pytest.mark.parametrize(
    ("model", "gpus", "fixed", "field", "value"),
    [
        ("mixtral-8x7b", 16, {"tp": 1, "pp": 2, "ep": 8, "recompute_modules": ("moe",)},
         "recompute_modules", ("moe",)),
        ("tiny-moe", 4, {"offload_modules": ("expert_fc1", "moe_act")},
         "offload_modules", ("expert_fc1", "moe_act")),
        ("tiny", 4, {"cpu_offloading_num_layers": 2}, "cpu_offloading_num_layers", 2),
    ],
)  # fmt: skip
def test_a_pinned_saver_is_kept(model, gpus, fixed, field, value) -> None:
    result = _search(model, gpus, 2048, 32, SearchSpace(fixed=fixed, max_micro_batch_size=2))
    assert result.top
    assert all(getattr(r.plan, field) == value for r in result.top)
    valid = result.candidates[result.candidates["rejected_by"] == ""]
    plans = [plan_from_row(row, result.model) for _, row in valid.head(200).iterrows()]
    assert plans and all(getattr(p, field) == value for p in plans)
    if field == "recompute_modules":
        assert all(r.plan.recompute == "selective" for r in result.top)
    if field == "cpu_offloading_num_layers":  # Megatron-core: pp 1 and no recompute
        assert all(r.plan.pp == 1 and r.plan.recompute == "none" for r in result.top)


SAVER_PINS = [
    {},
    {"recompute_modules": ("moe",)},
    {"recompute_modules": ("layernorm", "moe_act")},
    {"offload_modules": ("core_attn", "attn_proj")},
    {"cpu_offloading_num_layers": 1},
    {"cpu_offloading_num_layers": 1, "recompute": "selective"},
    {"offload_modules": ("attn_proj",)},
]


@settings(max_examples=10, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    name=st.sampled_from(["tiny", "tiny-moe", "mixtral-8x7b"]),
    gpus=st.sampled_from([4, 8, 16]),
    seq=st.sampled_from([512, 4096, 8192]),
    pins=st.sampled_from(SAVER_PINS),
)
def test_every_returned_plan_passes_the_saver_rules(name, gpus, seq, pins) -> None:
    space = SearchSpace(fixed=pins, max_micro_batch_size=2)
    result = _search(name, gpus, seq, 32, space)
    for ranked in (*result.top, *result.closest):
        plan = ranked.plan
        assert _saver_violations(result, plan) == []
        assert check_plan(result.model, result.cluster, result.job, plan) == []
    valid = result.candidates[result.candidates["rejected_by"].isin(["", "memory"])]
    for _, row in valid.head(100).iterrows():
        assert _saver_violations(result, plan_from_row(row, result.model)) == []


def _saver_violations(result, plan) -> list:
    found = (rule(result.model, result.cluster, result.job, plan) for rule in SAVER_RULES)
    return [v for v in found if v is not None]
