"""bench/nemo_h100_recipes.py: NeMo 2.0's H100 pre-train configurations as table rows
(NVIDIA/NeMo recommended_model_configs/model_configs_h100.csv, v2.2.0 to v2.5.0rc0)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

bench = load_bench("nemo_h100_recipes")


def _skip_without_dev_rows() -> None:
    _, error = bench.rows_by_ids(",".join(sorted(set(bench.ARCH_ROWS.values()))))
    if error is not None:
        pytest.skip(error)


def test_every_config_fills_its_gpus_and_ships_in_a_known_release():
    for c in bench.CONFIGS:
        assert c.gpus % (c.tp * c.pp * c.cp) == 0, c
        assert c.releases and set(c.releases) <= set(bench.RELEASE_TAGS), c
        assert c.model in bench.ARCH_ROWS


def test_config_table_parses_releases_and_modules():
    configs = bench.parse_configs(
        "releases,model,dtype,gpus,seq,tp,pp,cp,ep,vp,mbs,gbs,etp,fsdp,recompute_modules\n"
        "25.07+,DeepSeek V3,fp8,1024,4096,2,16,1,64,1,1,8192,1,0,mla_up_proj/mlp\n"
        "25.02/25.04,Llama3 8B,bf16,8,8192,1,1,2,1,1,1,128,,1,\n"
    )
    deepseek, llama = configs
    assert deepseek.releases == ("25.07", "25.09") and deepseek.precision == "FP8"
    assert deepseek.recompute == "selective (mla_up_proj, mlp)" and deepseek.etp == 1
    assert llama.releases == ("25.02", "25.04") and llama.fsdp and llama.etp is None


def test_table_row_states_the_columns_a_performance_table_prints():
    _skip_without_dev_rows()
    config = next(c for c in bench.CONFIGS if c.model == "Llama3 8B" and c.fsdp)
    raw = bench.table_row(config, "25.07")
    assert raw["source_id"] == "NEMO-PERF-25.07"
    assert raw["source_version"] == "NeMo 25.07 container"
    assert raw["gpu_type"] == "H100-SXM5-80GB" and raw["trust"] == "B"
    assert raw["fsdp_or_zero"] == "Megatron-FSDP" and raw["dp"] == "8"


def test_deepseek_rows_build_one_mtp_layer_on_the_last_stage():
    _skip_without_dev_rows()
    config = next(c for c in bench.CONFIGS if c.model == "DeepSeek V3" and "25.09" in c.releases)
    case = bench.case_for_row(bench.table_row(config, "25.09"))
    assert case.model.mtp_num_layers == 1
    assert case.plan.pipeline_model_parallel_layout.endswith("|tmL")


def test_priced_configs_report_memory_time_and_options():
    _skip_without_dev_rows()
    config = next(c for c in bench.CONFIGS if c.model == "Llama3 70B" and c.precision == "FP8")
    result = bench.price(config, "25.09")
    assert result["peak_gib"] > 0 and result["iteration_s"] > 0 and 0 < result["mfu"] < 1
    assert result["options"]["tp_comm_overlap"] is True
    assert result["options"]["cross_entropy_fusion"] == "te"
    # Megatron-LM's defaults keep bf16 weights beside TE's FP8 copies and fp32 gradients.
    assert result["without_rules"]["peak_gib"] > result["peak_gib"]
