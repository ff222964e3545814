"""Tests of `planner.space`, `planner.knob_generators` and `planner.space_tables`: each
generator yields only values its rules accept, fixed knobs pass through unchanged (so the
rules can reject them), and the two tables join into the full product of legal switches
per context."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021, TORCH_OPTIONS
from costmodel.execution_rules import PLAN_FEATURES
from planner.knob_generators import (
    bucket_sizes,
    cp_degrees,
    ep_degrees,
    mamba_cp_degrees,
    megatron_fsdp_options,
    micro_batch_sizes,
    optimizer_options,
    pp_degrees,
    recompute_options,
    tp_degrees,
    vpp_degrees,
)
from planner.space import CONTEXT_COLUMNS, PLAN_COLUMNS, SearchSpace, plan_from_row, plan_knobs
from planner.space_tables import degree_table, expand, neutral_switches, switch_rows, switch_table
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.presets import get_preset, preset_names
from specs.rules import check_plan

MODELS = ("tiny", "tiny-moe", "llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt-1.7b")


def _violations(model, gpus, job, row):
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    return check_plan(model, cluster, job, plan_from_row(row, model))


def test_tp_degrees_follow_heads_groups_ffn_and_scale_up() -> None:
    llama = get_preset("llama3-8b")  # 32 heads, 8 KV groups, ffn 14336 = 2^11 * 7
    assert list(tp_degrees(llama, 64, 8)) == [1, 2, 4, 8]
    # beyond the scale-up domain tp may exceed the 8 query groups by a multiple of them
    # (QKV activation sub-sharding); without that feature they cap tp at 8 (g % tp == 0)
    assert list(tp_degrees(llama, 64, 8, beyond_scale_up=True)) == [1, 2, 4, 8, 16, 32]
    wide = tp_degrees(llama, 64, 8, beyond_scale_up=True, kv_sub_sharding=False)
    assert list(wide) == [1, 2, 4, 8]
    # tp must divide the GPU count too: 24 GPUs allow 1, 2, 4, 8 (3 and 6 fail the heads)
    assert list(tp_degrees(llama, 24, 8)) == [1, 2, 4, 8]
    gpt = get_preset("gpt-1.7b")  # 24 heads, ffn 9216
    # tp must divide the 8-GPU domain (tp = 3 or 6 would put a group on two servers),
    # or beyond it be a multiple of it (12 spans 1.5 servers)
    assert list(tp_degrees(gpt, 48, 8)) == [1, 2, 4, 8]
    assert list(tp_degrees(gpt, 48, 8, beyond_scale_up=True)) == [1, 2, 4, 8, 24]
    assert list(tp_degrees(gpt, 48, 6)) == [1, 2, 3, 6]


@pytest.mark.parametrize("name", preset_names())
def test_tp_degrees_divide_the_query_groups(name: str) -> None:
    # Megatron-core takes g % tp == 0, or tp % g == 0 with QKV activation sub-sharding;
    # without that feature (paraplan's executor) exact division
    model = get_preset(name)
    for tp in tp_degrees(model, 1024, 1024, beyond_scale_up=True):
        g = model.query_groups
        assert model.uses_mla or g % tp == 0 or tp % g == 0, (name, tp)
        assert model.num_attention_heads % tp == 0, (name, tp)
    for tp in tp_degrees(model, 1024, 1024, beyond_scale_up=True, kv_sub_sharding=False):
        assert model.uses_mla or model.query_groups % tp == 0, (name, tp)


def test_pp_vpp_cp_ep_generators() -> None:
    llama = get_preset("llama3.1-405b")  # 126 layers
    # uneven splits: (126 + 2) / pp for pp in {4, ..., 64}, or first/last counts
    assert list(pp_degrees(llama, 2048)) == [1, 2, 4, 8, 16, 32, 64]
    assert list(pp_degrees(llama, 18)) == [1, 2, 3, 6, 9, 18]
    assert list(vpp_degrees(llama, 1)) == [1]
    assert list(vpp_degrees(llama, 9)) == [1, 2, 7, 14]  # 14 layers per stage
    assert list(cp_degrees(8192, 16)) == [1, 2, 4, 8, 16]
    assert list(cp_degrees(6, 8)) == [1]  # 6 % (2*2) != 0; 6 % (2*3) == 0 but 3 ∤ 8
    # packed documents of 1000 tokens: 1000 % (2·cp) == 0 for cp 1, 2, 4 (not 8: 1000 % 16)
    assert list(cp_degrees(8192, 16, document_tokens=1000)) == [1, 2, 4]
    assert list(ep_degrees(get_preset("mixtral-8x7b"), 12)) == [1, 2, 4]
    assert list(ep_degrees(llama, 64)) == [1]
    assert list(micro_batch_sizes(48, 8)) == [1, 2, 3, 4, 6, 8]


def test_switch_generators() -> None:
    assert ("none", 0, "uniform", "") in list(recompute_options(8, (0.25, 0.5, 0.75)))
    blocks = [n for r, n, m, _ in recompute_options(8, (0.25, 0.5, 0.75)) if m == "block"]
    assert blocks == [2, 4, 6]
    assert [m for _, _, m, _ in recompute_options(1, (0.5,))] == ["uniform"] * 3
    sets = [s for r, _, _, s in recompute_options(1, (), ("moe", "")) if r == "selective"]
    assert sets == ["", "moe"]  # the default modules once, then each set
    triples = list(optimizer_options())
    assert len(triples) == 5 and all(d and g for d, g, p in triples if p)
    # Megatron's default bucket is max(40M, 1M * dp * cp) parameters
    assert list(bucket_sizes(64, 2, True, (0.5, 2.0))) == [0, 64_000_000, 256_000_000]
    assert list(bucket_sizes(8, 1, True, (0.5, 2.0))) == [0, 20_000_000, 80_000_000]
    assert list(bucket_sizes(64, 2, False, (0.5, 2.0))) == [0]


def test_sequence_parallel_only_with_tp() -> None:
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    tiny = get_preset("tiny")
    rows = switch_rows(tiny, job, SearchSpace(), (1, 1, 1, 1, 8))
    assert not any(r["sequence_parallel"] or r["tp_comm_overlap"] for r in rows)
    rows = switch_rows(tiny, job, SearchSpace(), (2, 1, 1, 1, 4))
    assert any(r["tp_comm_overlap"] for r in rows)
    assert all(r["sequence_parallel"] for r in rows if r["tp_comm_overlap"])


def test_a_dsa_context_whose_tokens_tp_cannot_split_keeps_one_row_for_the_rules() -> None:
    # GLM-5.2's sparse attention needs sequence parallelism at tp > 1, and 48,625 tokens do
    # not split over tp 2: no switch pair was legal and `plan` ended in an IndexError
    # (`paraplan plan --model glm-5.2 --hardware b300 --num-gpus 96 --seq-len 48625 ...`)
    glm = get_preset("glm-5.2")
    job = TrainingJob(seq_length=48625, global_batch_size=256)
    rows = switch_rows(glm, job, SearchSpace(), (2, 1, 1, 1, 48))
    assert {(r["sequence_parallel"], r["tp_comm_overlap"]) for r in rows} == {(True, False)}
    rules = {
        v.rule
        for v in _violations(glm, 96, job, rows[0] | {"ep": 1, "etp": 2, "micro_batch_size": 1})
    }
    assert "sequence_parallel_seq_divisible_by_tp" in rules


def test_fixed_knobs_pass_through_even_when_illegal() -> None:
    llama = get_preset("llama3-8b")
    job = TrainingJob(seq_length=8192, global_batch_size=64)
    space = SearchSpace(fixed={"tp": 3, "sequence_parallel": True})
    degrees = degree_table(llama, 24, job, space, 8)
    assert set(degrees["tp"]) == {3}
    violations = _violations(llama, 24, job, degrees.iloc[0].to_dict() | neutral_switches())
    assert "heads_divisible_by_tp" in {v.rule for v in violations}
    # a fixed switch that no generated option offers comes back alone, for the rules to judge
    rows = switch_rows(llama, job, SearchSpace(fixed={"sequence_parallel": True}), (1, 1, 1, 1, 8))
    assert {(r["sequence_parallel"], r["tp_comm_overlap"]) for r in rows} == {(True, False)}


def test_unknown_knob_is_rejected_with_the_valid_names() -> None:
    with pytest.raises(SpecError, match="micro_batch_size"):
        SearchSpace(fixed={"mbs": 2})


@pytest.mark.parametrize(
    "fixed", [{"tp": 0}, {"micro_batch_size": -1}, {"recompute": "all"}, {"etp": -2}]
)
def test_fixed_values_out_of_range_are_rejected(fixed: dict[str, object]) -> None:
    # a degree of 0 once reached the degree generators and divided by zero
    name = next(iter(fixed))
    with pytest.raises(SpecError, match=f"fixed knob out of range: ParallelPlan.{name} "):
        SearchSpace(fixed=fixed)
    # 0 is the tables' None (Megatron's default) for the optional integer knobs
    assert SearchSpace(fixed={"ddp_bucket_size": 0, "recompute_num_layers": 0}).fixed


def test_expand_is_the_product_per_context() -> None:
    model = get_preset("tiny-moe")
    job = TrainingJob(seq_length=256, global_batch_size=16)
    space = SearchSpace(max_micro_batch_size=2)
    degrees = degree_table(model, 8, job, space, 8)
    switches = switch_table(model, job, space, degrees)
    table = expand(degrees, switches)
    per_context = switches.groupby(list(CONTEXT_COLUMNS)).size()
    expected = sum(per_context[tuple(ctx)] for ctx in degrees[list(CONTEXT_COLUMNS)].values)
    assert len(table) == expected
    assert list(table.columns) == list(PLAN_COLUMNS)
    assert set(table.loc[table["vpp"] > 1, "schedule"]) <= {"interleaved"}


def test_plan_row_round_trip() -> None:
    model = get_preset("tiny-moe")
    row = {
        "tp": 2, "pp": 2, "vpp": 2, "cp": 1, "dp": 2, "ep": 4, "etp": 1,
        "micro_batch_size": 1, "schedule": "interleaved",
    } | neutral_switches() | {"recompute": "full", "recompute_num_layers": 1}  # fmt: skip
    plan = plan_from_row(row, model)
    assert plan.etp == 1 and plan.schedule == "interleaved" and plan.ddp_bucket_size is None
    assert plan_from_row(plan_knobs(plan), model) == plan


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(MODELS),
    gpus=st.sampled_from([8, 16, 32, 64]),
    seq=st.sampled_from([512, 2048, 4096]),
    batch=st.sampled_from([16, 64, 96]),
    pick=st.integers(0, 10_000),
)
def test_generated_switches_never_break_a_rule(name, gpus, seq, batch, pick) -> None:
    """A degree row that passes with neutral switches passes with every generated switch
    combination of its context: the planner relies on this to check switches once per
    context instead of once per candidate."""
    model = get_preset(name)
    job = TrainingJob(seq_length=seq, global_batch_size=batch)
    space = SearchSpace(max_micro_batch_size=4)
    degrees = degree_table(model, gpus, job, space, 8)
    neutral = neutral_switches()
    valid = [
        row
        for row in degrees.to_dict("records")
        if not _violations(model, gpus, job, row | neutral)
    ]
    if not valid:
        return
    row = valid[pick % len(valid)]
    context = tuple(row[c] for c in CONTEXT_COLUMNS)
    for switches in switch_rows(model, job, space, context):
        assert _violations(model, gpus, job, row | switches) == []


def test_runtime_without_features_generates_only_the_2021_knobs() -> None:
    # Megatron-LM at the examples/sc21 commit (2021-08): no SP, tp-comm-overlap, selective
    # recompute, CP, distributed optimizer, uneven splits or bucket sizes; interleaving only
    # with pp > 2; overlapped (PyTorch DDP) gradient reduction only without pipelining.
    gpt = get_preset("gpt-1.7b")  # 24 layers, 24 heads
    job = TrainingJob(seq_length=2048, global_batch_size=64)
    space = SearchSpace().for_runtime(MEGATRON_2021)
    assert space.features == frozenset()
    degrees = degree_table(gpt, 16, job, space, 8)
    assert set(degrees["cp"]) == {1}
    assert set(degrees.loc[degrees["pp"] == 2, "vpp"]) == {1}
    assert (degrees["vpp"] > 1).any()
    assert not any(degrees[c].any() for c in ("decoder_first_pipeline_num_layers",))
    table = expand(degrees, switch_table(gpt, job, space, degrees))
    assert not table[["sequence_parallel", "tp_comm_overlap", "distributed_optimizer"]].any().any()
    assert not table["use_megatron_fsdp"].any()
    assert set(table["recompute"]) == {"none", "full"}
    assert not (table["overlap_grad_reduce"] & (table["pp"] > 1)).any()
    assert table.loc[table["pp"] == 1, "overlap_grad_reduce"].any()
    assert set(table["ddp_bucket_size"]) == {0}
    # today's Megatron-LM keeps every feature
    full = SearchSpace().for_runtime(DEFAULT_OPTIONS)
    assert full.features == PLAN_FEATURES
    rows = switch_rows(gpt, job, full, (2, 2, 1, 1, 4))
    assert {r["recompute"] for r in rows} == {"none", "selective", "full"}
    assert any(r["distributed_optimizer"] for r in rows)
    assert any(r["overlap_grad_reduce"] for r in rows)


def test_only_megatron_searches_tp_above_the_key_value_heads() -> None:
    # Llama 3 8B shapes with 2 key/value heads: tp 4 and 8 sub-shard the QKV output
    model = get_preset("llama3-8b").replace(num_query_groups=2)
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    megatron = SearchSpace().for_runtime(DEFAULT_OPTIONS)
    torch = SearchSpace().for_runtime(TORCH_OPTIONS)
    assert "kv_sub_sharding" in megatron.features
    assert "kv_sub_sharding" not in torch.features
    assert set(degree_table(model, 8, job, megatron, 8)["tp"]) == {1, 2, 4, 8}
    assert set(degree_table(model, 8, job, torch, 8)["tp"]) == {1, 2}
    # Megatron-LM 2021 and early 2023 predate the sub-sharding
    assert "kv_sub_sharding" not in SearchSpace().for_runtime(MEGATRON_2021).features


def test_megatron_fsdp_is_searched_beside_the_distributed_optimizer() -> None:
    # nothing to shard on one data-parallel rank
    assert list(megatron_fsdp_options(1, 1, ("optim_grads_params",))) == []
    (option,) = megatron_fsdp_options(2, 1, ("optim_grads_params",))
    assert option["use_megatron_fsdp"] and not option["distributed_optimizer"]
    job = TrainingJob(seq_length=2048, global_batch_size=32)
    tiny = get_preset("tiny")
    rows = switch_rows(tiny, job, SearchSpace(), (1, 1, 1, 1, 8))
    fsdp = {r["data_parallel_sharding_strategy"] for r in rows if r["use_megatron_fsdp"]}
    assert fsdp == {"optim_grads_params"}
    assert any(r["distributed_optimizer"] for r in rows)
    # a pinned strategy is the only sharding tried, with Megatron-FSDP on
    pinned = SearchSpace(fixed={"data_parallel_sharding_strategy": "optim"})
    rows = switch_rows(tiny, job, pinned, (1, 1, 1, 1, 8))
    assert rows and all(r["data_parallel_sharding_strategy"] == "optim" for r in rows)
    assert all(r["use_megatron_fsdp"] for r in rows)
    off = SearchSpace(fixed={"use_megatron_fsdp": False})
    assert not any(r["use_megatron_fsdp"] for r in switch_rows(tiny, job, off, (1, 1, 1, 1, 8)))


def test_the_precision_aware_optimizer_searches_only_sharded_optimizers() -> None:
    # Megatron-core: "--use-precision-aware-optimizer only supported with distributed
    # optimizer" (Megatron-FSDP turns the distributed optimizer on)
    aware = dataclasses.replace(DEFAULT_OPTIONS, precision_aware_optimizer=True)
    space = SearchSpace().for_runtime(aware)
    assert space.sharded_optimizer_only
    job = TrainingJob(seq_length=4096, global_batch_size=32)
    rows = switch_rows(get_preset("tiny"), job, space, (1, 1, 1, 1, 8))
    assert rows and all(r["distributed_optimizer"] or r["use_megatron_fsdp"] for r in rows)
    plain = switch_rows(get_preset("tiny"), job, SearchSpace(), (1, 1, 1, 1, 8))
    assert any(not (r["distributed_optimizer"] or r["use_megatron_fsdp"]) for r in plain)
    none_sharded = dataclasses.replace(aware, plan_features=frozenset())
    with pytest.raises(SpecError, match="plan_features have neither"):
        SearchSpace().for_runtime(none_sharded)


def test_optimizer_cpu_offload_searches_the_distributed_optimizer_only() -> None:
    # Megatron-core's offload needs the precision-aware optimizer, which needs the
    # distributed optimizer; Megatron-FSDP refuses it.
    gpt = get_preset("gpt-1.7b")
    job = TrainingJob(seq_length=2048, global_batch_size=64)
    options = dataclasses.replace(
        DEFAULT_OPTIONS, precision_aware_optimizer=True, optimizer_cpu_offload_fraction=1.0
    )
    space = SearchSpace().for_runtime(options)
    assert space.fixed["distributed_optimizer"] is True
    assert "megatron_fsdp" not in space.features
    rows = switch_rows(gpt, job, space, (2, 2, 1, 1, 4))
    assert rows and all(r["distributed_optimizer"] for r in rows)
    assert not any(r["use_megatron_fsdp"] for r in rows)
    pinned_off = SearchSpace(fixed={"distributed_optimizer": False})
    with pytest.raises(SpecError, match="needs the distributed optimizer"):
        pinned_off.for_runtime(options)


def test_a_fixed_layout_gives_each_pp_the_virtual_size_megatron_derives() -> None:
    # Megatron-LM sets vpp = layout stages / pp; the other vpp values only broke
    # layout_stages_match_pp_vpp (58,080 of 103,478 DeepSeek-V3 candidates on 256 GPUs)
    model = get_preset("deepseek-v3")
    job = TrainingJob(seq_length=4096, global_batch_size=4096)
    layout = "Et*3|(tt|)*29m|L"  # 32 virtual stages
    space = SearchSpace(fixed={"pipeline_model_parallel_layout": layout, "tp": 1, "ep": 16})
    degrees = degree_table(model, 256, job, space, 4)
    pairs = set(zip(degrees["pp"], degrees["vpp"], strict=True))
    # pp 1 cannot interleave (vpp needs pp > 1): its one candidate is left to the rules
    assert pairs - {(1, 1)} == {(2, 16), (4, 8), (8, 4), (16, 2)}


def test_per_layer_cuda_graphs_search_no_full_and_no_moe_recompute() -> None:
    # Megatron-core: "full recompute is only supported with full iteration CUDA graph",
    # "moe recompute is not supported with moe_router CUDA graph"; the search once picked
    # selective recompute of moe under a captured moe_router
    graphs = dataclasses.replace(DEFAULT_OPTIONS, cuda_graph_scopes=frozenset({"moe_router"}))
    space = SearchSpace().for_runtime(graphs)
    assert not space.full_recompute
    assert space.recompute_module_sets and all("moe" not in m for m in space.recompute_module_sets)
    job = TrainingJob(seq_length=256, global_batch_size=16)
    rows = switch_rows(get_preset("tiny-moe"), job, space, (1, 1, 1, 1, 8))
    assert rows and all(r["recompute"] != "full" for r in rows)
    whole_step = dataclasses.replace(graphs, cuda_graph_scopes=frozenset({"full_iteration"}))
    assert SearchSpace().for_runtime(whole_step).full_recompute
    with pytest.raises(SpecError, match="full_iteration"):
        SearchSpace(fixed={"recompute": "full"}).for_runtime(graphs)


def test_a_fixed_pp_without_a_split_keeps_a_row_for_the_rules() -> None:
    # Kimi-K2's 61 layers on a fixed pp 16: no split of planner.splits divides them, and
    # the table was empty ("No candidate plan exists"), never naming the rule or its layout fix
    model = get_preset("kimi-k2")
    job = TrainingJob(seq_length=4096, global_batch_size=4096)
    degrees = degree_table(model, 1024, job, SearchSpace(fixed={"pp": 16, "tp": 8}), 8)
    assert len(degrees) and set(degrees["vpp"]) == {1}
    row = degrees.iloc[0].to_dict() | neutral_switches()
    assert "layers_divisible_by_pp" in {v.rule for v in _violations(model, 1024, job, row)}


def test_hybrid_cp_degrees_follow_the_mamba_split() -> None:
    # 96 Mamba-2 heads in 6 groups (MambaContextParallel.__init__): at tp 1 the 6 groups
    # split over cp 2 but neither divide nor are divided by cp 4 or 8; at tp 2 the 3
    # groups of a rank fit no cp > 1
    model = get_preset("nemotron-h-8b").replace(mamba_num_heads=96, mamba_num_groups=6)
    job = TrainingJob(seq_length=8192, global_batch_size=64)
    assert list(mamba_cp_degrees(model, 1, [1, 2, 4, 8])) == [1, 2]
    assert list(mamba_cp_degrees(model, 2, [1, 2, 4, 8])) == [1]
    degrees = degree_table(model, 16, job, SearchSpace(), 8)
    pairs = set(zip(degrees["tp"], degrees["cp"], strict=True))
    assert {(1, 2), (2, 1)} <= pairs and not {(1, 4), (1, 8), (2, 2), (2, 4)} & pairs
    eight = degree_table(get_preset("nemotron-h-8b"), 16, job, SearchSpace(), 8)
    assert {2, 4, 8} <= set(eight["cp"])  # 128 heads, 8 groups: every power of two fits


def test_a_fixed_ep_no_stage_fits_keeps_rows_for_the_rules() -> None:
    # tiny-moe's 8 experts on 8 GPUs: ep 3 divides neither the experts nor any stage's
    # ranks, so no etp fits beside it; the table was empty and the search said only
    # "No candidate plan exists", never experts_divisible_by_ep or its fix
    model = get_preset("tiny-moe")
    job = TrainingJob(seq_length=256, global_batch_size=8)
    degrees = degree_table(model, 8, job, SearchSpace(fixed={"ep": 3}), 8)
    assert len(degrees) and set(degrees["ep"]) == {3}
    assert (degrees["etp"] == degrees["tp"]).all()
    row = degrees.iloc[0].to_dict() | neutral_switches()
    assert "experts_divisible_by_ep" in {v.rule for v in _violations(model, 8, job, row)}
    # an ep some stage fits keeps only the rows where an etp fits
    fitting = degree_table(model, 8, job, SearchSpace(fixed={"ep": 8}), 8)
    assert len(fitting) and (fitting["tp"] * fitting["cp"] * fitting["dp"] % 8 == 0).all()


def test_parallel_block_switches_leave_tp_comm_overlap_off() -> None:
    # specs.rules_block.parallel_block_not_with_tp_comm_overlap: the generator mirrors it
    neox = get_preset("gpt-neox-20b")
    job = TrainingJob(seq_length=2048, global_batch_size=64)
    rows = switch_rows(neox, job, SearchSpace(), (2, 1, 1, 1, 4))
    assert any(r["sequence_parallel"] for r in rows)
    assert not any(r["tp_comm_overlap"] for r in rows)
    sequential = switch_rows(
        neox.replace(layer_block="sequential"), job, SearchSpace(), (2, 1, 1, 1, 4)
    )
    assert any(r["tp_comm_overlap"] for r in sequential)
