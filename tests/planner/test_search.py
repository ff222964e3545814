"""Tests of `planner.search` and `planner.explain`: returned plans pass the rules and fit;
over a small space the search returns the argmax of the detailed estimate; rejections are
counted per rule and for memory; a search where nothing fits says what would."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import MEGATRON_2021
from costmodel.memory import peak_memory_bytes
from planner.candidates import enumerate_candidates
from planner.explain import explain, group_seconds
from planner.explain_fit import fit_suggestions, min_gpus_for_model_state
from planner.ranking import RANK_TOLERANCE
from planner.search import memory_limit_bytes, search_plans
from planner.search_result import MEMORY_REJECTION
from planner.space import SearchSpace, plan_from_row
from profiles import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan

H100 = "h100-sxm-80gb"
# Switches fixed to keep the spaces small enough to simulate every candidate.
FEW_SWITCHES = {
    "overlap_param_gather": False,
    "ddp_bucket_size": None,
    "tp_comm_overlap": False,
    "recompute_method": "uniform",
}


@functools.cache
def _profile():
    return load_profile(H100)


def _search(model: str, gpus: int, seq: int, batch: int, **kw):
    cluster = ClusterSpec(hardware=H100, num_gpus=gpus)
    job = TrainingJob(seq_length=seq, global_batch_size=batch)
    return search_plans(get_preset(model), cluster, job, _profile(), **kw)


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    name=st.sampled_from(["tiny", "tiny-gelu", "tiny-moe", "llama3-8b", "mixtral-8x7b"]),
    gpus=st.sampled_from([4, 8, 16]),
    seq=st.sampled_from([512, 2048, 4096]),
    batch=st.sampled_from([8, 32, 64]),
    headroom=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_every_returned_plan_passes_the_rules_and_fits(name, gpus, seq, batch, headroom) -> None:
    result = _search(
        name, gpus, seq, batch, top_k=4, memory_headroom=headroom,
        space=SearchSpace(fixed=FEW_SWITCHES, max_micro_batch_size=4),
    )  # fmt: skip
    limit = memory_limit_bytes(_profile(), headroom)
    for ranked in result.top:
        assert check_plan(result.model, result.cluster, result.job, ranked.plan) == []
        assert ranked.fits and ranked.estimate.peak_memory_bytes <= limit
    if result.best is not None:
        assert result.best is result.top[0]
        # The planner's order (`planner.ranking.order_plans`): fastest first, except that a
        # simpler plan within the tie band may precede a faster one.
        rates = [r.estimate.tokens_per_s for r in result.top]
        for i, earlier in enumerate(rates):
            assert all(later <= earlier * (1 + RANK_TOLERANCE) for later in rates[i + 1 :])
    else:
        assert result.top == ()


@settings(max_examples=5, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    name=st.sampled_from(["tiny", "tiny-moe", "tiny-gelu"]),
    gpus=st.sampled_from([2, 4]),
    batch=st.sampled_from([8, 16]),
)
def test_small_space_returns_the_argmax_of_the_detailed_estimate(name, gpus, batch) -> None:
    """Simulating every candidate, the best plan is the brute-force argmax of
    `estimate_plan` tokens/s among the plans that fit."""
    model = get_preset(name)
    cluster = ClusterSpec(hardware=H100, num_gpus=gpus)
    job = TrainingJob(seq_length=512, global_batch_size=batch)
    space = SearchSpace(
        fixed=FEW_SWITCHES | {"distributed_optimizer": True}, max_micro_batch_size=2
    )
    table = enumerate_candidates(model, cluster, job, space, 8).table
    limit = memory_limit_bytes(_profile(), 0.05)
    rates = []
    for row in table.to_dict("records"):
        est = estimate_plan(model, cluster, job, plan_from_row(row, model), _profile())
        if est.peak_memory_bytes <= limit:
            rates.append(est.tokens_per_s)
    result = search_plans(model, cluster, job, _profile(), space=space, top_k=len(table))
    assert result.best is not None
    assert result.best.estimate.tokens_per_s == pytest.approx(max(rates), rel=1e-12)


def test_screen_keeps_the_detailed_best_in_its_top_k() -> None:
    """With a short list, the best plan is within 3% of the detailed best found by
    simulating every candidate (the screen's ranking agrees with the simulator)."""
    fixed = FEW_SWITCHES | {"micro_batch_size": 1, "distributed_optimizer": True}
    space = SearchSpace(fixed=fixed | {"overlap_grad_reduce": True})
    short = _search("llama3-8b", 4, 4096, 16, top_k=5, space=space)
    full = _search("llama3-8b", 4, 4096, 16, top_k=short.num_valid, space=space)
    assert short.best is not None and full.best is not None
    ratio = short.best.estimate.tokens_per_s / full.best.estimate.tokens_per_s
    assert ratio == pytest.approx(1.0, abs=0.03)


def test_rejections_are_counted_per_rule() -> None:
    result = _search("llama3-8b", 24, 4096, 48, space=SearchSpace(fixed={"tp": 3}))
    assert result.best is None and result.num_valid == 0
    assert result.rejected["heads_divisible_by_tp"] == result.num_enumerated
    assert "tp in" in result.rule_examples["heads_divisible_by_tp"]
    assert "heads_divisible_by_tp" in explain(result)
    rejected_rows = result.candidates[result.candidates["rejected_by"] != ""]
    assert rejected_rows["represents"].sum() == result.num_enumerated


def test_memory_rejections_and_closest_candidates() -> None:
    result = _search("llama3-70b", 8, 4096, 16, top_k=3)
    assert result.best is None and result.top == ()
    assert result.rejected[MEMORY_REJECTION] == result.num_valid > 0
    peaks = [r.estimate.peak_memory_bytes for r in result.closest]
    assert peaks == sorted(peaks) and len(peaks) == 3
    text = explain(result)
    assert "No plan fits" in text and "Closest candidates" in text
    assert "at least 16 GPUs" in text  # 70.6e9 params * 18 bytes / 76 GiB
    limit = result.memory_limit_bytes
    suggestions = fit_suggestions(
        result.model, result.cluster, result.job, result.closest[0].plan, limit
    )
    fitting = [s for s in suggestions if s.fits]
    assert fitting and all(s.num_gpus > 8 for s in fitting)
    assert min_gpus_for_model_state(result.model, result.job, limit) == 16


def test_explanation_compares_winner_and_runner_up() -> None:
    result = _search("llama3-8b", 16, 4096, 32, top_k=4)
    assert result.best is not None and len(result.top) > 1
    text = explain(result)
    assert "Best: " + result.best.plan.label() in text
    assert "Beats the runner-up (" + result.top[1].plan.label() in text
    groups = group_seconds(result.best.estimate)
    assert sum(groups.values()) == pytest.approx(result.best.estimate.iteration_time_s)


def test_headroom_and_top_k_are_validated() -> None:
    with pytest.raises(SpecError, match="memory_headroom"):
        _search("tiny", 4, 512, 8, memory_headroom=1.0)
    with pytest.raises(SpecError, match="top_k"):
        _search("tiny", 4, 512, 8, top_k=0)


def test_more_headroom_never_fits_more() -> None:
    space = SearchSpace(fixed=FEW_SWITCHES, max_micro_batch_size=4)
    counts = [
        _search("llama3-8b", 8, 8192, 32, space=space, top_k=1, memory_headroom=h).rejected[
            MEMORY_REJECTION
        ]
        for h in (0.0, 0.1, 0.4)
    ]
    assert counts == sorted(counts)


def test_progress_reports_each_phase() -> None:
    seen = []
    _search("tiny", 4, 512, 8, top_k=2, progress=lambda phase, done, total: seen.append(phase))
    assert {"check", "screen", "simulate"} <= set(seen)


def test_llama3_405b_on_16384_gpus_finds_uneven_plans() -> None:
    # 126 layers divide by no pp that leaves a whole dp and fits; the uneven splits do.
    result = _search("llama3.1-405b", 16384, 8192, 2048, top_k=3)
    assert result.best is not None and result.best.fits
    assert all(r.plan.has_uneven_split for r in result.top)
    assert all(r.plan.pp in (4, 8, 16, 32, 64) for r in result.top)


def test_a_pinned_split_is_kept() -> None:
    fixed = {
        "tp": 8,
        "pp": 16,
        "decoder_first_pipeline_num_layers": 7,
        "decoder_last_pipeline_num_layers": 7,
    }
    result = _search("llama3.1-405b", 16384, 8192, 2048, top_k=2, space=SearchSpace(fixed=fixed))
    assert result.best is not None
    assert {r.plan.decoder_first_pipeline_num_layers for r in result.top} == {7}
    assert not any(r.plan.account_for_embedding_in_pipeline_split for r in result.top)


def test_search_keeps_to_the_features_of_the_runtime() -> None:
    # Megatron-LM 2021 (costmodel.execution_presets.MEGATRON_2021) had none of PLAN_FEATURES.
    cluster = ClusterSpec(hardware="a100-sxm-80gb", num_gpus=16)
    job = TrainingJob(seq_length=2048, global_batch_size=64)
    result = search_plans(
        get_preset("gpt-1.7b"),
        cluster,
        job,
        load_profile("a100-sxm-80gb"),
        top_k=5,
        options=MEGATRON_2021,
    )
    assert result.top
    for ranked in result.top:
        plan = ranked.plan
        assert not (plan.sequence_parallel or plan.distributed_optimizer or plan.tp_comm_overlap)
        assert plan.recompute != "selective" and plan.cp == 1
        assert not (plan.overlap_grad_reduce and plan.pp > 1)


def test_megatron_fsdp_is_chosen_where_only_sharded_weights_fit() -> None:
    # Llama 3 8B on 4 H100, seq 8192, tp = pp = 1: the distributed optimizer keeps the bf16
    # weights and fp32 main gradients whole (6 bytes x 8.0e9 parameters = 45 GiB) besides a
    # quarter of the 12-byte optimizer state (22 GiB), over 76 GiB with any activations;
    # Megatron-FSDP's optim_grads_params shards all 18 bytes (34 GiB).
    pinned = {"tp": 1, "pp": 1, "cp": 1, "recompute": "full", "recompute_method": "uniform"}
    without = _search(
        "llama3-8b", 4, 8192, 64, space=SearchSpace(fixed=pinned, megatron_fsdp_strategies=())
    )
    with_fsdp = _search("llama3-8b", 4, 8192, 64, space=SearchSpace(fixed=pinned))
    assert without.best is None
    assert with_fsdp.best is not None
    plan = with_fsdp.best.plan
    assert plan.use_megatron_fsdp and plan.data_parallel_sharding_strategy == "optim_grads_params"
    assert not plan.distributed_optimizer
    assert "fsdp-optim_grads_params" in explain(with_fsdp)
    # where nothing fits, the suggestions name Megatron-FSDP
    assert "Megatron-FSDP" in explain(without)


def test_a_pinned_sharding_strategy_is_kept() -> None:
    fixed = {
        "tp": 2,
        "pp": 1,
        "data_parallel_sharding_strategy": "optim",
        "use_megatron_fsdp": True,
    }
    result = _search("tiny", 8, 512, 32, space=SearchSpace(fixed=fixed), top_k=3)
    assert result.top
    for ranked in result.top:
        assert ranked.plan.use_megatron_fsdp
        assert ranked.plan.data_parallel_sharding_strategy == "optim"


def test_fit_suggestions_offer_cpu_activation_offloading() -> None:
    # Llama 3 70B, tp1 pp1, 8192 tokens on 64 GB200 with Megatron-FSDP: the activations,
    # not the sharded model state, overflow the device; offloading half the layers to host
    # memory is among the suggestions, priced by costmodel.memory.
    model = get_preset("llama3-70b")
    cluster = ClusterSpec(hardware="gb200-nvl72", num_gpus=64)
    job = TrainingJob(seq_length=8192, global_batch_size=256)
    plan = ParallelPlan(
        dp=64,
        micro_batch_size=2,
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
    )
    found = {s.change: s for s in fit_suggestions(model, cluster, job, plan, 180 * 2**30)}
    layers = found["cpu_offloading_num_layers=40 (to host memory)"]
    assert layers.plan.cpu_offloading_num_layers == 40
    assert layers.peak_memory_bytes < peak_memory_bytes(model, job, plan)
    assert "offload_modules=core_attn,attn_proj (to host memory)" in found


def test_search_refills_when_screened_plans_are_too_large_for_the_simulator():
    # Megatron-core's distributed Muon deals whole parameters, so one rank holds the whole
    # embedding's Adam state; the screen spreads the state evenly and lets through plans
    # about a GiB too large. The fastest screened plans of Llama-3-70B on 512 H100 are such
    # plans; the search simulates further screened-fitting plans until top_k fit.
    model = get_preset("llama3-70b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=512)
    job = TrainingJob(seq_length=8192, global_batch_size=1024, optimizer="dist_muon")
    result = search_plans(model, cluster, job, load_profile("h100-sxm-80gb"), top_k=3)
    assert result.best is not None
    assert len(result.top) == 3
    assert all(r.estimate.peak_memory_bytes <= result.memory_limit_bytes for r in result.top)
    assert result.num_simulated >= len(result.top)


def test_fit_suggestions_offer_context_parallelism_at_long_sequences() -> None:
    # Llama 3 70B, 524,288 tokens on 8 H100 at tp4 cp2 with full recompute: each rank holds
    # seq / (tp·cp) tokens of every layer's input, so only more cp ranks shrink the
    # activations; the suggestions named pp and offloading alone, every one still over
    model = get_preset("llama3-70b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=524288, global_batch_size=8)
    plan = ParallelPlan(
        tp=4,
        cp=2,
        sequence_parallel=True,
        recompute="full",
        recompute_method="uniform",
        recompute_num_layers=1,
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
    )
    limit = 0.95 * 80 * 10**9
    found = fit_suggestions(model, cluster, job, plan, limit)
    first = found[0]
    assert first.fits and first.plan.cp > plan.cp and first.plan.tp == plan.tp
    assert first.change == f"cp={first.plan.cp} on {first.num_gpus} GPUs"
    assert first.num_gpus == 8 * first.plan.cp // plan.cp
    assert first.peak_memory_bytes < limit < peak_memory_bytes(model, job, plan)


def test_fit_suggestions_open_with_the_plan_fields_they_set() -> None:
    # Each change opens with ``field=value`` of a ParallelPlan field, the form that
    # paraplan.fix_flags.cli_fix rewrites into the CLI's flags.
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    plan = ParallelPlan(tp=2, dp=4, micro_batch_size=2, distributed_optimizer=False)
    fields = {f.name for f in dataclasses.fields(ParallelPlan)}
    found = fit_suggestions(model, cluster, job, plan, float("inf"))
    assert len(found) > 5
    for suggestion in found:
        field, _, value = suggestion.change.split(" ")[0].partition("=")
        assert field in fields and value, suggestion.change


def test_fit_suggestions_name_every_field_the_user_must_reset() -> None:
    # An interleaved plan recomputing two layers per chunk: the deeper pipelines need vpp 1
    # and full recompute of one layer at a time, and their changes say so.
    model = get_preset("llama3-8b")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8)
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    plan = ParallelPlan(
        pp=2, vpp=2, schedule="interleaved", dp=4, recompute="full", recompute_num_layers=2
    )
    changes = {s.change for s in fit_suggestions(model, cluster, job, plan, float("inf"))}
    assert {"pp=4 vpp=1", "recompute=full recompute_num_layers=1"} <= changes
