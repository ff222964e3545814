"""bench/saver_recipes.py: the memory savers a published row's recipe runs (activation
offloading, recomputed modules, offloaded modules); rows from
`tests.bench.published_row_cases`."""

from __future__ import annotations

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import DEEPSEEK_GB200, LLAMA70_FSDP, LLAMA405_GB200, row_with

savers = load_bench("saver_recipes")
rows_mod = load_bench("published_rows")


def test_llama_fsdp_rows_offload_the_recipes_layer_count():
    # GB200 FP8: llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1,
    # cpu_offloading_num_layers=40; GB300 FP8: 20.
    gb200 = rows_mod.case_for_row(LLAMA70_FSDP).plan
    gb300 = rows_mod.case_for_row(row_with(LLAMA70_FSDP, gpu_type="GB300 (NVL72)")).plan
    assert (gb200.cpu_offloading_num_layers, gb300.cpu_offloading_num_layers) == (40, 20)
    assert gb200.recompute == "none" and gb200.offload_modules == ()
    # the BF16 recipes differ (GB200 20 at mbs 1): a BF16 row is not given the FP8 count
    bf16 = rows_mod.case_for_row(row_with(LLAMA70_FSDP, precision="BF16")).plan
    assert bf16.cpu_offloading_num_layers == 0
    assert rows_mod.case_for_row(LLAMA405_GB200).plan.cpu_offloading_num_layers == 0


def test_deepseek_rows_recompute_the_recipes_modules():
    # 26.06 (v0.5.x) deepseek_workload_base_configs.py: GB200 MXFP8 "mla_up_proj"; 26.04
    # (v0.4.x): GB200 "mlp", BF16 "mla_up_proj"; B200 "mla_up_proj"; GB300 MXFP8 none in 26.06
    gb200 = rows_mod.case_for_row(DEEPSEEK_GB200).plan
    assert gb200.recompute == "selective" and gb200.recompute_modules == ("mla_up_proj",)
    older = row_with(DEEPSEEK_GB200, source_id="MBRIDGE-26.04.01")
    assert rows_mod.case_for_row(older).plan.recompute_modules == ("mlp",)
    bf16 = rows_mod.case_for_row(row_with(older, precision="BF16")).plan
    assert bf16.recompute_modules == ("mla_up_proj",)
    b200 = rows_mod.case_for_row(row_with(DEEPSEEK_GB200, gpu_type="B200")).plan
    assert b200.recompute_modules == ("mla_up_proj",)
    assert "rc=mla_up_proj" in b200.label()
    # 26.04.01 (llmb-r0.4.1 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2, row 174): + "mlp";
    # 26.04 (v0.4.0 B200_V1, row 220) keeps "mla_up_proj" alone.
    llmb = row_with(DEEPSEEK_GB200, gpu_type="B200", source_id="MBRIDGE-26.04.01")
    assert rows_mod.case_for_row(llmb).plan.recompute_modules == ("mla_up_proj", "mlp")
    v040 = row_with(llmb, source_id="MBRIDGE-26.04")
    assert rows_mod.case_for_row(v040).plan.recompute_modules == ("mla_up_proj",)
    gb300 = row_with(DEEPSEEK_GB200, gpu_type="GB300 (NVL72)", pp="2", vpp="8", ep="32")
    assert "rc=-" in rows_mod.case_for_row(gb300).plan.label()
    # 25.09 (v0.1.0rc4 yaml): selective with Megatron's default module, core_attn
    first = rows_mod.case_for_row(row_with(DEEPSEEK_GB200, source_id="MBRIDGE-25.09")).plan
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
