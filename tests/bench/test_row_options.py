"""bench/row_options.py: the execution options of a published row, the userbuffers methods
of its recipe or Transformer Engine's defaults, and the memory options of the release's
launch scripts (`row_recipes.expandable_segments`); rows from
`tests.bench.published_row_cases`."""

from __future__ import annotations

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import (
    DEEPSEEK_GB200,
    LLAMA70_FSDP,
    LLAMA405_GB200,
    MLM_README_32B,
    row_with,
)

recipes = load_bench("row_recipes")
rows_mod = load_bench("published_rows")


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
        row = row_with(LLAMA405_GB200, source_id=f"MBRIDGE-{release}")
        assert recipes.expandable_segments(row), release
    # before 26.06 not for NVFP4, nor for GB300 before 26.04
    nvfp4 = row_with(LLAMA405_GB200, source_id="MBRIDGE-26.04", precision="NVFP4")
    assert not recipes.expandable_segments(nvfp4)
    gb300 = row_with(LLAMA405_GB200, source_id="MBRIDGE-26.02", gpu_type="GB300 (NVL72)")
    assert not recipes.expandable_segments(gb300)
    # Llama with Megatron-FSDP: never set before 26.06, removed by perf_plugins.py in 26.06
    for release in ("26.04.01", "26.06"):
        fsdp = row_with(LLAMA70_FSDP, source_id=f"MBRIDGE-{release}")
        assert not recipes.expandable_segments(fsdp), release
    # DeepSeek-V3 on GB200: 26.04 and 26.06, not 26.02
    assert rows_mod.case_for_row(DEEPSEEK_GB200).options.expandable_segments
    older = row_with(DEEPSEEK_GB200, source_id="MBRIDGE-26.02")
    assert not recipes.expandable_segments(older)
