"""bench/published_rows.py: the profile, plan and model a published row maps to, the rows
set apart with their reason, and the rows printed unlike their recipe (`row_recipes`,
`pipeline_recipes`); rows from `tests.bench.published_row_cases`."""

from __future__ import annotations

import pytest

from specs.pipeline_layout import expand_layout
from specs.pipeline_split import pipeline_split
from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import (
    DEEPSEEK_GB200,
    GPT_OSS_B300,
    LLAMA70_FSDP,
    LLAMA70_LORA_GB300,
    LLAMA405_GB200,
    MLM_README_32B,
    row_with,
)

recipes = load_bench("row_recipes")
pipeline = load_bench("pipeline_recipes")
rows_mod = load_bench("published_rows")


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
    plain = rows_mod.case_for_row(row_with(DEEPSEEK_GB200, model="DeepSeekV3 (w/o MTP)"))
    assert plain.model.mtp_num_layers == 0
    assert plain.plan.pipeline_model_parallel_layout.endswith("tL")
    # 32 stages: ceil(61 / 32) = 2 per stage leaves nothing for the last one.
    with pytest.raises(rows_mod.NotExpressible, match="no recipe layout"):
        rows_mod.case_for_row(row_with(DEEPSEEK_GB200, pp="8", vpp="4"))


def test_megatron_fsdp_row_shards_params_grads_and_optimizer():
    plan = rows_mod.case_for_row(LLAMA70_FSDP).plan
    assert plan.use_megatron_fsdp
    assert plan.data_parallel_sharding_strategy == "optim_grads_params"
    assert not plan.distributed_optimizer and plan.dp == 64


def test_a_lora_row_takes_its_recipes_adapters_and_keeps_its_printed_plan():
    # Megatron-Bridge v0.5.0 llama3_70b_peft_config: dim 16, alpha 32; the perf configs'
    # target_modules ["linear_qkv"]; LLAMA3_70B_LORA_CONFIG_GB300_FP8_CS_V1: tp1 pp2 vpp20
    case = rows_mod.case_for_row(LLAMA70_LORA_GB300)
    lora = case.job.lora
    assert lora is not None
    assert (lora.rank, lora.alpha, lora.targets) == (16, 32, ("linear_qkv",))
    assert case.plan.label() == "tp1 pp2 vpp20 dp4 mbs1 distopt"
    assert case.job.seq_length == 4096 and case.job.global_batch_size == 32
    sft = rows_mod.case_for_row(row_with(LLAMA70_LORA_GB300, task="SFT (fine-tune)"))
    assert sft.job.lora is None and sft.plan == case.plan


def test_unknown_lora_recipes_and_flagged_rows_are_set_apart_with_the_reason():
    with pytest.raises(rows_mod.NotExpressible, match="LoRA recipe"):
        rows_mod.case_for_row(row_with(LLAMA70_FSDP, task="LoRA (fine-tune)"))
    flagged = "footnote: Performance regression in GPT-OSS 120B pre-training is a known issue"
    with pytest.raises(rows_mod.NotExpressible, match="regression"):
        rows_mod.case_for_row(row_with(GPT_OSS_B300, notes=flagged))
    assert rows_mod.case_for_row(row_with(LLAMA70_FSDP, task="SFT (fine-tune)")).plan.dp == 64


def test_qwen3_expert_tp_is_the_recipes_one():
    row = row_with(
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
    row = row_with(
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


def test_megatron_readme_rows_run_the_stated_tp_overlap_with_untied_embeddings():
    # README 2024: "--tp-comm-overlap" for every run; "GPT 32B" is the untied count
    # 48·12·7168² + 2·131072·7168 = 31.5e9 (tied: 30.5e9).
    case = rows_mod.case_for_row(MLM_README_32B)
    assert case.plan.tp_comm_overlap and case.plan.sequence_parallel
    assert not case.model.tied_embeddings
    unstated = dict(MLM_README_32B, notes="", source_id="OTHER", model="GPT 32B")
    other = rows_mod.case_for_row(unstated)
    assert not other.plan.tp_comm_overlap and other.model.tied_embeddings


def test_rows_printed_unlike_their_recipe_carry_the_reason():
    # row 250: 26.02.01 GB300 MXFP8 printed pp4, no vpp, mbs 2; recipe pp4 vpp5 mbs 1
    row_250 = row_with(
        LLAMA70_FSDP,
        source_id="MBRIDGE-26.02.01",
        gpu_type="GB300 (NVL72)",
        precision="MXFP8",
        pp="4",
        fsdp_or_zero="DDP + distributed optimizer (FSDP=0)",
    )
    assert "vpp5" in recipes.recipe_mismatch(row_250)
    # the 26.02 row of the same recipe prints it as the recipe runs it
    assert recipes.recipe_mismatch(row_with(row_250, source_id="MBRIDGE-26.02")) is None
    # row 352: 25.09 GB200, the parenthesised MXFP8 layout printed at micro-batch 2
    row_352 = row_with(
        row_250,
        source_id="MBRIDGE-25.09",
        gpu_type="GB200 (NVL72)",
        precision="alternative quantization granularity (GB200/B200: MXFP8 32x32)",
    )
    assert "micro-batch 1" in recipes.recipe_mismatch(row_352)
    assert recipes.recipe_mismatch(LLAMA405_GB200) is None


def test_gpu_types_map_to_a_stored_profile_or_are_refused_by_name():
    assert rows_mod.profile_for("H200 SXM 141GB") == "h200-sxm-141gb"
    assert rows_mod.gpu_generation("H200 SXM 141GB") == "H100/H800"
    assert rows_mod.profile_for("A100 40GB") == "a100-sxm-40gb"
    assert rows_mod.profile_for("A100-SXM4-40GB") == "a100-sxm-40gb"
    assert rows_mod.profile_for("A100 (Ampere)") == "a100-sxm-80gb"
    # "400GB/s" of an H800's NVLink is not a 40 GB A100: the H800 takes its own profile
    h800 = "H800 (NVLink 400GB/s-class, export variant of H100)"
    assert rows_mod.profile_for(h800) == "h800-sxm-80gb"
    assert rows_mod.gpu_generation(h800) == "H100/H800"
    assert rows_mod.profile_for("A800 80GB") == "a800-sxm-80gb"
    assert rows_mod.gpu_generation("A800 80GB") == "A100"
    for card in ("H100 PCIe 80GB", "H100 NVL", "A100-PCIE-40GB"):
        with pytest.raises(rows_mod.NotExpressible, match="PCIe and NVL cards"):
            rows_mod.profile_for(card)
    assert rows_mod.profile_for("GB200 (NVL72)") == "gb200-nvl72"  # NVL72 is not an NVL card
    assert rows_mod.profile_for("NVIDIA H100 80GB HBM3") == "h100-sxm-80gb"
    assert rows_mod.profile_for("DGX A100 40GB") == "a100-sxm-40gb"
    assert rows_mod.gpu_generation("HGX B200") == "Blackwell"
    assert rows_mod.gpu_generation("nvidia h200") == "H100/H800"
