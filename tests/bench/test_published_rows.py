"""bench/published_rows.py and the recipe modules: the kinds of rows the recipes open.

Each case is one row of ``published-runs-dev.csv`` (the columns the mapping reads, copied
from the row named), worked by hand against the recipe file cited in `row_recipes`,
`pipeline_recipes`, `saver_recipes` or `precision_recipes`.
"""

from __future__ import annotations

import pytest

from costmodel.execution_presets import device_options
from profiles.store import load_profile
from specs.pipeline_layout import expand_layout
from specs.pipeline_split import pipeline_split
from tests.bench.bench_loader import load_bench

recipes = load_bench("row_recipes")
pipeline = load_bench("pipeline_recipes")
savers = load_bench("saver_recipes")
precision = load_bench("precision_recipes")
rows_mod = load_bench("published_rows")
model_mod = load_bench("row_model")

LLAMA405_GB200 = {
    # row 119 (MBRIDGE-26.06, Llama 3.1 405B on 256 GB200, FP8).
    "row_id": "119",
    "source_id": "MBRIDGE-26.06",
    "model": "LLAMA3.1_405B",
    "arch_notes": "SwiGLU, GQA; NeMo Llama31Config405B",
    "num_layers": "126",
    "hidden_size": "16384",
    "num_attention_heads": "128",
    "num_query_groups": "8",
    "ffn_hidden_size": "53248",
    "vocab_size": "128256",
    "seq_length": "8192",
    "gpu_type": "GB200 (NVL72)",
    "num_gpus": "256",
    "tp": "4",
    "pp": "16",
    "vpp": "4",
    "cp": "1",
    "ep": "n/a",
    "micro_batch_size": "1",
    "global_batch_size": "1536",
    "precision": "FP8",
}

DEEPSEEK_GB200 = {
    # row 103 (MBRIDGE-26.06.01, DeepSeek-V3 on 256 GB200, MXFP8).
    "row_id": "103",
    "source_id": "MBRIDGE-26.06.01",
    "model": "DeepSeekV3",
    "arch_notes": "MLA (q_lora 1536, kv_lora 512); first 3 layers dense (ffn 18432); "
    "1 shared expert; MTP 1 layer unless stated",
    "num_layers": "61",
    "hidden_size": "7168",
    "num_attention_heads": "128",
    "ffn_hidden_size": "18432",
    "vocab_size": "129280",
    "seq_length": "4096",
    "num_experts": "256",
    "moe_top_k": "8",
    "moe_ffn_hidden_size": "2048",
    "moe_shared_expert_ffn": "2048",
    "gpu_type": "GB200 (NVL72)",
    "num_gpus": "256",
    "tp": "1",
    "pp": "4",
    "vpp": "4",
    "cp": "1",
    "ep": "64",
    "micro_batch_size": "1",
    "global_batch_size": "4096",
    "precision": "MXFP8",
}

GPT_OSS_B300 = {
    # row 129 (MBRIDGE-26.06, GPT-OSS 120B on 64 B300, MXFP8).
    "row_id": "129",
    "source_id": "MBRIDGE-26.06",
    "model": "GPT OSS 120B",
    "arch_notes": "kv_channels 64; alternating sliding-window (128) attention; "
    "NeMo GPTOSSConfig120B",
    "num_layers": "36",
    "hidden_size": "2880",
    "num_attention_heads": "64",
    "num_query_groups": "8",
    "ffn_hidden_size": "2880",
    "vocab_size": "201088",
    "seq_length": "4096",
    "num_experts": "128",
    "moe_top_k": "4",
    "moe_ffn_hidden_size": "2880",
    "gpu_type": "B300",
    "num_gpus": "64",
    "tp": "1",
    "pp": "1",
    "vpp": "n/a",
    "cp": "1",
    "ep": "8",
    "micro_batch_size": "4",
    "global_batch_size": "1280",
    "precision": "MXFP8",
}

LLAMA70_FSDP = {
    # row 160 (MBRIDGE-26.04.01, Llama 3 70B with Megatron-FSDP on 64 GB200, FP8).
    "row_id": "160",
    "source_id": "MBRIDGE-26.04.01",
    "model": "LLAMA3_70B",
    "arch_notes": "SwiGLU, GQA; NeMo Llama3Config70B",
    "num_layers": "80",
    "hidden_size": "8192",
    "num_attention_heads": "64",
    "num_query_groups": "8",
    "ffn_hidden_size": "28672",
    "vocab_size": "128256",
    "seq_length": "8192",
    "gpu_type": "GB200 (NVL72)",
    "num_gpus": "64",
    "tp": "1",
    "pp": "1",
    "vpp": "n/a",
    "cp": "1",
    "ep": "n/a",
    "fsdp_or_zero": "Megatron-FSDP, sharding group = GPUs/(TP*PP)=64",
    "micro_batch_size": "2",
    "global_batch_size": "256",
    "precision": "FP8",
}

ZERO3_SC21 = {
    # row 11 (SC21 Table 2, GPT 174.6B with ZeRO-3 on 384 A100).
    "row_id": "11",
    "source_id": "SC21-T2",
    "model": "GPT 174.6B",
    "arch_notes": "GPT-3-style; 175B = GPT-3 (96 layers, 96 heads, h 12288); 530B = Table 1 config",
    "num_layers": "96",
    "hidden_size": "12288",
    "num_attention_heads": "96",
    "vocab_size": "51200",
    "seq_length": "2048",
    "gpu_type": "A100-SXM4-80GB",
    "num_gpus": "384",
    "tp": "1",
    "pp": "1",
    "vpp": "",
    "cp": "1",
    "fsdp_or_zero": "ZeRO-3 (DeepSpeed), no TP/PP",
    "micro_batch_size": "4",
    "global_batch_size": "1536",
    "precision": "mixed (fp16 per repo scripts)",
}


def _with(row: dict[str, str], **changes: str) -> dict[str, str]:
    return row | changes


def test_blackwell_rows_map_to_their_stored_profiles():
    assert rows_mod.profile_for("GB200 (NVL72)") == "gb200-nvl72"
    assert rows_mod.profile_for("GB300 (NVL72)") == "gb300-nvl72"
    assert rows_mod.profile_for("B300") == "b300"
    assert rows_mod.profile_for("B200") == "b200"
    assert rows_mod.gpu_generation("GB300 (NVL72)") == "Blackwell"


def test_llama405b_counts_embedding_and_loss_as_layers():
    case = rows_mod.case_for_row(LLAMA405_GB200)
    plan = case.plan
    assert plan.account_for_embedding_in_pipeline_split
    assert plan.account_for_loss_in_pipeline_split
    # (126 + 2) / (16 x 4) = 2 per chunk; the embedding's chunk (rank 0, chunk 0) and the
    # loss's chunk (rank 15, chunk 3) build one transformer layer each.
    split = pipeline_split(case.model, plan)
    assert split.chunk(0, 0).num_layers == 1 and split.chunk(15, 3).num_layers == 1
    assert split.chunk(7, 2).num_layers == 2
    assert sum(split.rank_num_layers(r) for r in range(16)) == 126
    assert case.profile == "gb200-nvl72" and case.job.precision == "fp8"
    # the 405B base recipe's CommOverlapConfig(tp_comm_overlap=True)
    assert plan.tp_comm_overlap and plan.sequence_parallel
    assert not rows_mod.case_for_row(LLAMA70_FSDP).plan.tp_comm_overlap  # tp = 1


def test_deepseek_layout_with_its_mtp_layer():
    case = rows_mod.case_for_row(DEEPSEEK_GB200)
    assert case.model.mtp_num_layers == 1
    # 16 virtual stages: ceil(61 / 16) = 4 layers on each of the first 15 (the embedding
    # with the first), 61 - 60 = 1 on the last with the MTP layer and the loss: the GB300
    # recipe's "Et*4|(t*4|)*14tmL".
    layout = case.plan.pipeline_model_parallel_layout
    assert expand_layout(layout) == expand_layout("Et*4|(t*4|)*14tmL")
    split = pipeline_split(case.model, case.plan)
    assert split.rank_mtp_layers(3) == 1 and split.chunk(3, 3).num_layers == 1
    assert case.plan.etp == 1


def test_deepseek_without_mtp_and_a_stage_count_no_recipe_covers():
    plain = rows_mod.case_for_row(_with(DEEPSEEK_GB200, model="DeepSeekV3 (w/o MTP)"))
    assert plain.model.mtp_num_layers == 0
    assert plain.plan.pipeline_model_parallel_layout.endswith("tL")
    # 32 stages: ceil(61 / 32) = 2 per stage leaves nothing for the last one.
    with pytest.raises(rows_mod.NotExpressible, match="no recipe layout"):
        rows_mod.case_for_row(_with(DEEPSEEK_GB200, pp="8", vpp="4"))


def test_gpt_oss_row_has_its_window_sinks_and_biases():
    model = rows_mod.case_for_row(GPT_OSS_B300).model
    assert model.sliding_window == 128 and model.sliding_window_every == 2
    assert model.attention_sinks and model.add_bias_linear
    # even layers windowed, odd layers full (openai/gpt-oss-120b layer_types)
    assert model.window_layer_mask()[:4] == (True, False, True, False)


def test_gpt_oss_row_is_gated_rmsnorm_rope_and_untied():
    # Megatron-Bridge GPTOSSProvider: gated_linear_unit, RMSNorm, yarn rotary positions,
    # share_embeddings_and_output_weights False; the notes name none of them.
    model = rows_mod.case_for_row(GPT_OSS_B300).model
    assert model.activation == "swiglu"
    assert model.normalization == "rmsnorm" and model.position_embedding == "rope"
    assert not model.tied_embeddings


def test_megatron_fsdp_row_shards_params_grads_and_optimizer():
    plan = rows_mod.case_for_row(LLAMA70_FSDP).plan
    assert plan.use_megatron_fsdp
    assert plan.data_parallel_sharding_strategy == "optim_grads_params"
    assert not plan.distributed_optimizer and plan.dp == 64


def test_zero3_lora_and_flagged_rows_are_set_apart_with_the_reason():
    with pytest.raises(rows_mod.NotExpressible, match="ZeRO-3"):
        rows_mod.case_for_row(ZERO3_SC21)
    with pytest.raises(rows_mod.NotExpressible, match="LoRA"):
        rows_mod.case_for_row(_with(LLAMA70_FSDP, task="LoRA (fine-tune)"))
    flagged = "footnote: Performance regression in GPT-OSS 120B pre-training is a known issue"
    with pytest.raises(rows_mod.NotExpressible, match="regression"):
        rows_mod.case_for_row(_with(GPT_OSS_B300, notes=flagged))
    assert rows_mod.case_for_row(_with(LLAMA70_FSDP, task="SFT (fine-tune)")).plan.dp == 64


def test_qwen3_expert_tp_is_the_recipes_one():
    row = _with(
        GPT_OSS_B300,
        source_id="MBRIDGE-25.09",
        model="Qwen3_235B_a22B (tokendrop)",
        arch_notes="all layers MoE; kv_channels 128; SwiGLU experts",
        num_layers="94",
        hidden_size="4096",
        num_attention_heads="64",
        num_query_groups="4",
        ffn_hidden_size="12288",
        vocab_size="151936",
        num_experts="128",
        moe_top_k="8",
        moe_ffn_hidden_size="1536",
        tp="2",
        ep="64",
    )
    # row 359: TP2 with EP64 on 64 GPUs is only whole with ETP = 1 (1 x 64 x 1 = 64).
    plan = rows_mod.case_for_row(row).plan
    assert (plan.tp, plan.etp, plan.ep, plan.dp) == (2, 1, 64, 32)


def test_unstated_interleaving_stays_refused():
    row = _with(
        LLAMA405_GB200,
        source_id="LLAMA3-T4",
        model="Llama 3 405B",
        vpp="",
        notes="Pipeline: interleaved schedule with tunable N, first/last stage have one "
        "fewer layer",
    )
    with pytest.raises(rows_mod.NotExpressible, match="virtual pipeline degree"):
        rows_mod.case_for_row(row)


def test_bloom_partition_counts_the_tied_embedding_twice():
    fields = pipeline.pipeline_fields(
        {"source_id": "BLOOM-176B", "model": "BLOOM-176B"}, None, pp=12, vpp=1
    )
    assert fields == {
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    }
    assert pipeline.pipeline_fields({"source_id": "MBRIDGE-26.06"}, None, pp=1, vpp=1) == {}


def test_llama_fsdp_rows_offload_the_recipes_layer_count():
    # GB200 FP8: llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1,
    # cpu_offloading_num_layers=40; GB300 FP8: 20.
    gb200 = rows_mod.case_for_row(LLAMA70_FSDP).plan
    gb300 = rows_mod.case_for_row(_with(LLAMA70_FSDP, gpu_type="GB300 (NVL72)")).plan
    assert (gb200.cpu_offloading_num_layers, gb300.cpu_offloading_num_layers) == (40, 20)
    assert gb200.recompute == "none" and gb200.offload_modules == ()
    # the BF16 recipes differ (GB200 20 at mbs 1): a BF16 row is not given the FP8 count
    bf16 = rows_mod.case_for_row(_with(LLAMA70_FSDP, precision="BF16")).plan
    assert bf16.cpu_offloading_num_layers == 0
    assert rows_mod.case_for_row(LLAMA405_GB200).plan.cpu_offloading_num_layers == 0


def test_deepseek_rows_recompute_the_recipes_modules():
    # 26.06 (v0.5.x) deepseek_workload_base_configs.py: GB200 MXFP8 "mla_up_proj"; 26.04
    # (v0.4.x): GB200 "mlp", BF16 "mla_up_proj"; B200 "mla_up_proj"; GB300 MXFP8 none in 26.06
    gb200 = rows_mod.case_for_row(DEEPSEEK_GB200).plan
    assert gb200.recompute == "selective" and gb200.recompute_modules == ("mla_up_proj",)
    older = _with(DEEPSEEK_GB200, source_id="MBRIDGE-26.04.01")
    assert rows_mod.case_for_row(older).plan.recompute_modules == ("mlp",)
    bf16 = rows_mod.case_for_row(_with(older, precision="BF16")).plan
    assert bf16.recompute_modules == ("mla_up_proj",)
    b200 = rows_mod.case_for_row(_with(DEEPSEEK_GB200, gpu_type="B200")).plan
    assert b200.recompute_modules == ("mla_up_proj",)
    assert "rc=mla_up_proj" in b200.label()
    # 26.04.01 (llmb-r0.4.1 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2, row 174): + "mlp";
    # 26.04 (v0.4.0 B200_V1, row 220) keeps "mla_up_proj" alone.
    llmb = _with(DEEPSEEK_GB200, gpu_type="B200", source_id="MBRIDGE-26.04.01")
    assert rows_mod.case_for_row(llmb).plan.recompute_modules == ("mla_up_proj", "mlp")
    v040 = _with(llmb, source_id="MBRIDGE-26.04")
    assert rows_mod.case_for_row(v040).plan.recompute_modules == ("mla_up_proj",)
    gb300 = _with(DEEPSEEK_GB200, gpu_type="GB300 (NVL72)", pp="2", vpp="8", ep="32")
    assert "rc=-" in rows_mod.case_for_row(gb300).plan.label()
    # 25.09 (v0.1.0rc4 yaml): selective with Megatron's default module, core_attn
    first = rows_mod.case_for_row(_with(DEEPSEEK_GB200, source_id="MBRIDGE-25.09")).plan
    assert first.recompute == "selective" and first.recompute_modules is None


def test_kimi_k2_gb300_rows_recompute_the_mla_up_projection():
    raw = {"source_id": "MBRIDGE-26.06", "model": "Kimi_K2", "gpu_type": "GB300 (NVL72)"}
    fields = savers.saver_fields(raw | {"precision": "MXFP8"}, pp=4, fsdp=False)
    assert fields == {"recompute": "selective", "recompute_modules": ("mla_up_proj",)}
    b200 = raw | {"gpu_type": "B200", "precision": "MXFP8"}
    assert savers.saver_fields(b200, pp=4, fsdp=False) == {}


def test_moe_zoo_qwen3_mxfp8_row_recomputes_and_offloads():
    fields = savers.saver_fields(
        {"source_id": "MOEZOO-QWEN3-GB200", "model": "Qwen3-235B-A22B", "precision": "MXFP8"},
        pp=4,
        fsdp=False,
    )
    # best_practice/qwen3/readme.md: --recompute-modules moe_act layernorm
    # --offload-modules expert_fc1 moe_act
    assert fields["recompute_modules"] == ("moe_act", "layernorm")
    assert fields["offload_modules"] == ("expert_fc1", "moe_act")
    bf16 = {"source_id": "MOEZOO-QWEN3-GB200", "model": "Qwen3-235B-A22B", "precision": "BF16"}
    assert savers.saver_fields(bf16, pp=8, fsdp=False) == {}


def test_moe_zoo_fp8_rows_run_the_precision_aware_optimizer():
    # sbatch_benchmarking.sh @ e8650517, lines 90 (PR=fp8) and 105 (PR=mxfp8):
    # --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16;
    # PR=bf16 does not add it
    zoo = {"source_id": "MOEZOO-QWEN3-GB200", "model": "Qwen3-235B-A22B"}
    fields = precision.optimizer_precision_fields(zoo | {"precision": "MXFP8"})
    assert fields == {
        "precision_aware_optimizer": True,
        "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16",
    }
    assert precision.optimizer_precision_fields(zoo | {"precision": "BF16"}) == {}
    bridge = {"source_id": "MBRIDGE-26.06", "model": "Qwen3-235B-A22B", "precision": "MXFP8"}
    assert precision.optimizer_precision_fields(bridge) == {}


MLM_README_32B = {
    # row 41 (MLM-README-2024, GPT 32B on 384 H100).
    "row_id": "41",
    "source_id": "MLM-README-2024",
    "model": "GPT 32B",
    "arch_notes": "GPT-style; 'Varied hidden size, attention heads, and layers'; ffn size / "
    "GQA / activation not stated",
    "num_layers": "48",
    "hidden_size": "7168",
    "num_attention_heads": "56",
    "vocab_size": "131072",
    "seq_length": "4096",
    "gpu_type": "H100",
    "num_gpus": "384",
    "tp": "8",
    "pp": "1",
    "global_batch_size": "192",
    "fsdp_or_zero": "distributed optimizer implied by --overlap-param-gather (not stated "
    "explicitly)",
    "source_version": "Megatron-Core r0.8.0 (per figure legend)",
    "notes": "Comm overlap on: --overlap-grad-reduce --overlap-param-gather "
    "--tp-comm-overlap, PP overlap default. MBS, VPP, recompute, SP not published.",
}


def test_megatron_readme_rows_run_the_stated_tp_overlap_with_untied_embeddings():
    # README 2024: "--tp-comm-overlap" for every run; "GPT 32B" is the untied count
    # 48·12·7168² + 2·131072·7168 = 31.5e9 (tied: 30.5e9).
    case = rows_mod.case_for_row(MLM_README_32B)
    assert case.plan.tp_comm_overlap and case.plan.sequence_parallel
    assert not case.model.tied_embeddings
    unstated = dict(MLM_README_32B, notes="", source_id="OTHER", model="GPT 32B")
    other = rows_mod.case_for_row(unstated)
    assert not other.plan.tp_comm_overlap and other.model.tied_embeddings


def test_megatron_bridge_llama_rows_run_the_recipes_userbuffers_methods():
    # Megatron-Bridge comm_overlap.py: userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192
    # reduce-scatters proj_fprop / fc2_fprop by ring_exchange; every BulkOverlapCfg there has
    # set_sm_margin=False. BF16 configurations keep the pipeline reduce-scatter.
    fp8 = rows_mod.case_for_row(LLAMA405_GB200).options
    assert fp8.tp_overlap_rs_method == "ring_exchange"
    assert fp8.tp_overlap_bulk_sm_margin is False
    bf16 = rows_mod.case_for_row(dict(LLAMA405_GB200, precision="BF16")).options
    assert bf16.tp_overlap_rs_method == "pipeline"
    assert bf16.tp_overlap_bulk_sm_margin is False
    # No TP overlap (tp = 1), or a source whose recipe is not Megatron-Bridge's: TE defaults.
    for raw in (LLAMA70_FSDP, MLM_README_32B):
        options = rows_mod.case_for_row(raw).options
        assert options.tp_overlap_rs_method == "pipeline"
    assert rows_mod.case_for_row(LLAMA70_FSDP).options.tp_overlap_bulk_sm_margin is True


def test_megatron_lm_r080_rows_run_transformer_engine_1x_userbuffers_defaults():
    # r0.8.0 passes ub_cfgs = {} to initialize_ub; TE 1.x registers every method with
    # set_sm_margin 0 (transformer_engine/pytorch/module/base.py v1.8, add_ub).
    options = rows_mod.case_for_row(MLM_README_32B).options
    assert options.tp_overlap_bulk_sm_margin is False
    assert options.tp_overlap_pipeline_sm_margin is False


def test_memory_options_follow_the_release_launch_scripts():
    # every release: TE's fused loss (cross_entropy_fusion_impl "te")
    options = rows_mod.case_for_row(LLAMA405_GB200).options
    assert options.cross_entropy_fusion == "te"
    # 405B GB200 FP8: expandable segments in every release (setup_experiment.py 25.09,
    # perf_plugins.py 25.11-26.04, executors.py PERF_ENV_VARS 26.06)
    assert options.expandable_segments
    for release in ("25.09", "25.11", "26.02.01", "26.04.01"):
        row = _with(LLAMA405_GB200, source_id=f"MBRIDGE-{release}")
        assert recipes.expandable_segments(row), release
    # before 26.06 not for NVFP4, nor for GB300 before 26.04
    nvfp4 = _with(LLAMA405_GB200, source_id="MBRIDGE-26.04", precision="NVFP4")
    assert not recipes.expandable_segments(nvfp4)
    gb300 = _with(LLAMA405_GB200, source_id="MBRIDGE-26.02", gpu_type="GB300 (NVL72)")
    assert not recipes.expandable_segments(gb300)
    # Llama with Megatron-FSDP: never set before 26.06, removed by perf_plugins.py in 26.06
    for release in ("26.04.01", "26.06"):
        fsdp = _with(LLAMA70_FSDP, source_id=f"MBRIDGE-{release}")
        assert not recipes.expandable_segments(fsdp), release
    # DeepSeek-V3 on GB200: 26.04 and 26.06, not 26.02
    assert rows_mod.case_for_row(DEEPSEEK_GB200).options.expandable_segments
    older = _with(DEEPSEEK_GB200, source_id="MBRIDGE-26.02")
    assert not recipes.expandable_segments(older)


def test_rows_printed_unlike_their_recipe_carry_the_reason():
    # row 250: 26.02.01 GB300 MXFP8 printed pp4, no vpp, mbs 2; recipe pp4 vpp5 mbs 1
    row_250 = _with(
        LLAMA70_FSDP,
        source_id="MBRIDGE-26.02.01",
        gpu_type="GB300 (NVL72)",
        precision="MXFP8",
        pp="4",
        fsdp_or_zero="DDP + distributed optimizer (FSDP=0)",
    )
    assert "vpp5" in recipes.recipe_mismatch(row_250)
    # the 26.02 row of the same recipe prints it as the recipe runs it
    assert recipes.recipe_mismatch(_with(row_250, source_id="MBRIDGE-26.02")) is None
    # row 352: 25.09 GB200, the parenthesised MXFP8 layout printed at micro-batch 2
    row_352 = _with(
        row_250,
        source_id="MBRIDGE-25.09",
        gpu_type="GB200 (NVL72)",
        precision="alternative quantization granularity (GB200/B200: MXFP8 32x32)",
    )
    assert "micro-batch 1" in recipes.recipe_mismatch(row_352)
    assert recipes.recipe_mismatch(LLAMA405_GB200) is None


def test_fp8_rows_keep_the_recipes_fp8_parameters():
    # Megatron-Bridge FP8 current scaling (mixed_precision.py, every release): FP8
    # parameters, per-tensor scales; GB200 runs FP8 GEMMs in any layout (the profile's)
    case = rows_mod.case_for_row(LLAMA70_FSDP)
    options = case.options
    assert (options.fp8_param, options.fp8_recipe) == (True, "tensorwise")
    assert options.fp8_tn_gemm_only is None
    assert not device_options(options, load_profile(case.profile)).fp8_tn_gemm_only
    for release in ("25.09", "25.11", "26.02", "26.06"):
        row = _with(LLAMA70_FSDP, source_id=f"MBRIDGE-{release}")
        assert precision.fp8_weight_fields(row)["fp8_param"], release
    # MXFP8 (bf16_with_mxfp8_mixed) and its 25.09 "alternative" rows
    mx = _with(LLAMA405_GB200, precision="MXFP8")
    assert precision.fp8_weight_fields(mx) == {"fp8_recipe": "mxfp8", "fp8_param": True}
    alternative = _with(LLAMA405_GB200, precision="alternative quantization granularity (GB)")
    assert precision.fp8_weight_fields(alternative)["fp8_recipe"] == "mxfp8"
    # GPT-OSS in 26.06: get_gpt_oss_20b_precision_config turns FP8 parameters off
    assert rows_mod.case_for_row(GPT_OSS_B300).options.fp8_param is False
    # BF16 rows and other sources keep Megatron-core's defaults
    assert precision.fp8_weight_fields(_with(LLAMA405_GB200, precision="BF16")) == {}
    nemo = _with(LLAMA405_GB200, source_id="NEMO-LONGSEQ")
    assert precision.fp8_weight_fields(nemo) == {}


LLAMA2_LONGSEQ = {
    # row 67 (NEMO-LONGSEQ, NeMo 24.03.01, LLAMA2-7B FP8 on 4 H100, seq 4096).
    "row_id": "67",
    "source_id": "NEMO-LONGSEQ",
    "source_version": "NeMo 24.03.01.framework container",
    "trust": "B",
    "model": "LLAMA2-7B",
    "arch_notes": "SwiGLU; NeMo Llama2Config7B",
    "num_layers": "32",
    "hidden_size": "4096",
    "num_attention_heads": "32",
    "num_query_groups": "32",
    "ffn_hidden_size": "11008",
    "vocab_size": "32000",
    "seq_length": "4096",
    "gpu_type": "H100-SXM5-80GB",
    "num_gpus": "4",
    "tp": "1",
    "pp": "1",
    "cp": "1",
    "dp": "4",
    "global_batch_size": "1024",
    "precision": "FP8",
    "tflops_per_gpu": "768",
}


def test_nemo_llama2_fp8_rows_reduce_gradients_in_bf16():
    # NeMo-Framework-Launcher examples/training/llama/h100/llama2_7b_fp8.sh: Apex
    # DistributedFusedAdam with grad_sync_dtype=bf16, a 2-byte contiguous gradient buffer
    assert rows_mod.case_for_row(LLAMA2_LONGSEQ).options.main_grad_bytes == 2
    # the same model in bf16, and other sources, keep Megatron-core's fp32 main gradients
    assert precision.grad_sync_fields(_with(LLAMA2_LONGSEQ, precision="BF16")) == {}
    assert precision.grad_sync_fields(_with(LLAMA2_LONGSEQ, source_id="NEMOTRON4-15B")) == {}


@pytest.mark.parametrize(
    ("model", "expected"), [("Qwen3_30B_a3B", True), ("Qwen3-235B-A22B", True)]
)
def test_qwen3_rows_normalize_query_and_key(model: str, expected: bool) -> None:
    assert model_mod.uses_qk_layernorm({"model": model}) is expected


def test_other_rows_have_no_query_key_norms() -> None:
    assert not rows_mod.case_for_row(LLAMA405_GB200).model.qk_layernorm
    assert not rows_mod.case_for_row(GPT_OSS_B300).model.qk_layernorm
