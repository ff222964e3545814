"""bench/precision_recipes.py: the precision settings a published row's recipe runs (FP8
parameters and recipe, the precision-aware optimizer, bf16 gradient reduction); rows from
`tests.bench.published_row_cases`."""

from __future__ import annotations

from costmodel.execution_presets import device_options
from profiles.store import load_profile
from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import (
    GPT_OSS_B300,
    LLAMA2_LONGSEQ,
    LLAMA70_FSDP,
    LLAMA405_GB200,
    row_with,
)

precision = load_bench("precision_recipes")
rows_mod = load_bench("published_rows")


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


def test_fp8_rows_keep_the_recipes_fp8_parameters():
    # Megatron-Bridge FP8 current scaling (mixed_precision.py, every release): FP8
    # parameters, per-tensor scales; GB200 runs FP8 GEMMs in any layout (the profile's)
    case = rows_mod.case_for_row(LLAMA70_FSDP)
    options = case.options
    assert (options.fp8_param, options.fp8_recipe) == (True, "tensorwise")
    assert options.fp8_tn_gemm_only is None
    assert not device_options(options, load_profile(case.profile)).fp8_tn_gemm_only
    for release in ("25.09", "25.11", "26.02", "26.06"):
        row = row_with(LLAMA70_FSDP, source_id=f"MBRIDGE-{release}")
        assert precision.fp8_weight_fields(row)["fp8_param"], release
    # MXFP8 (bf16_with_mxfp8_mixed) and its 25.09 "alternative" rows
    mx = row_with(LLAMA405_GB200, precision="MXFP8")
    assert precision.fp8_weight_fields(mx) == {"fp8_recipe": "mxfp8", "fp8_param": True}
    alternative = row_with(LLAMA405_GB200, precision="alternative quantization granularity (GB)")
    assert precision.fp8_weight_fields(alternative)["fp8_recipe"] == "mxfp8"
    # GPT-OSS in 26.06: get_gpt_oss_20b_precision_config turns FP8 parameters off
    assert rows_mod.case_for_row(GPT_OSS_B300).options.fp8_param is False
    # BF16 rows and other sources keep Megatron-core's defaults
    assert precision.fp8_weight_fields(row_with(LLAMA405_GB200, precision="BF16")) == {}
    nemo = row_with(LLAMA405_GB200, source_id="NEMO-LONGSEQ")
    assert precision.fp8_weight_fields(nemo) == {}


def test_nemo_llama2_fp8_rows_reduce_gradients_in_bf16():
    # NeMo-Framework-Launcher examples/training/llama/h100/llama2_7b_fp8.sh: Apex
    # DistributedFusedAdam with grad_sync_dtype=bf16, a 2-byte contiguous gradient buffer
    assert rows_mod.case_for_row(LLAMA2_LONGSEQ).options.main_grad_bytes == 2
    # the same model in bf16, and other sources, keep Megatron-core's fp32 main gradients
    assert precision.grad_sync_fields(row_with(LLAMA2_LONGSEQ, precision="BF16")) == {}
    assert precision.grad_sync_fields(row_with(LLAMA2_LONGSEQ, source_id="NEMOTRON4-15B")) == {}


def test_nvfp4_recipes_keep_their_last_layers_in_bf16():
    # Nemotron 3 Super NVFP4: v0.4.0 set_nemotron_3_super_common_configs (26.04) and
    # nemotron_3_super_bf16_with_nvfp4_mixed (llmb-r0.4.1, v0.5.0, v0.5.1): the last 14
    kept = {
        "first_last_layers_bf16": True,
        "num_layers_at_start_in_bf16": 0,
        "num_layers_at_end_in_bf16": 14,
    }
    super_row = {"model": "Nemotron_3_Super", "gpu_type": "GB300 (NVL72)", "precision": "NVFP4"}
    for source in ("MBRIDGE-26.04", "MBRIDGE-26.04.01", "MBRIDGE-26.06", "MBRIDGE-26.06.01"):
        assert precision.bf16_layer_fields(super_row | {"source_id": source}) == kept, source
    # the same model's MXFP8 rows run bf16_with_mxfp8_mixed, which sets none
    mxfp8 = super_row | {"source_id": "MBRIDGE-26.06", "precision": "MXFP8"}
    assert precision.bf16_layer_fields(mxfp8) == {}
    # GPT-OSS NVFP4 from v0.5.0 (get_gpt_oss_20b_precision_config): the last 4; none before
    oss = row_with(GPT_OSS_B300, precision="NVFP4")
    assert precision.bf16_layer_fields(oss)["num_layers_at_end_in_bf16"] == 4
    assert precision.bf16_layer_fields(row_with(oss, source_id="MBRIDGE-26.04")) == {}
    assert precision.bf16_layer_fields(GPT_OSS_B300) == {}  # MXFP8: first_last_layers_bf16 False
    # Llama 3 NVFP4 performance configs take get_precision_config's bf16_with_nvfp4_mixed
    assert precision.bf16_layer_fields(row_with(LLAMA405_GB200, precision="NVFP4")) == {}
    # FP8 current scaling: utils/precision.py turns the config's one layer at each end off
    assert precision.bf16_layer_fields(row_with(LLAMA405_GB200, precision="FP8-CS")) == {}
