"""bench/gpt_oss_recipes.py: the graphs, recompute, dispatcher, overlap, fused expert MLP and
RoPE path each Megatron-Bridge GPT-OSS 120B row carries, checked against the recipe files
its module docstring cites (rows named by their ``published-runs-dev.csv`` ids)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import GPT_OSS_120B_SHAPE

oss = load_bench("gpt_oss_recipes")
rows_mod = load_bench("published_rows")

ATTN_ROUTER = frozenset({"attn", "moe_router", "moe_preprocess"})
SELECTIVE = {"recompute": "selective", "recompute_modules": ("layernorm", "moe_act")}


def row(source: str, gpu: str, precision: str = "BF16") -> dict[str, str]:
    return {"source_id": source, "model": "GPT OSS 120B", "gpu_type": gpu, "precision": precision}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # row 302 (26.02, v0.3.0): GB300 TE graphs, alltoall.
        (row("MBRIDGE-26.02", "GB300 (NVL72)"), {"cuda_graph_scopes": ATTN_ROUTER}),
        # row 303: GB200 recomputes instead; no graphs, alltoall.
        (row("MBRIDGE-26.02", "GB200 (NVL72)"), {}),
        # row 267 (26.02.01, r0.3.0): B300's hybridep field is never applied.
        (row("MBRIDGE-26.02.01", "B300"), {"cuda_graph_scopes": ATTN_ROUTER}),
        # row 222 (26.04, v0.4.0): GB200 HybridEP with the all-to-all overlap.
        (
            row("MBRIDGE-26.04", "GB200 (NVL72)"),
            {"moe_dispatcher": "flex", "moe_a2a_overlap": True},
        ),
        # row 224: B200 HybridEP.
        (row("MBRIDGE-26.04", "B200"), {"moe_dispatcher": "flex"}),
        # row 176 (26.04.01, llmb-r0.4.1): GB200 back on alltoall, overlap kept.
        (row("MBRIDGE-26.04.01", "GB200 (NVL72)"), {"moe_a2a_overlap": True}),
        # row 178: B200 alltoall; row 177: B300 keeps HybridEP.
        (row("MBRIDGE-26.04.01", "B200"), {}),
        (
            row("MBRIDGE-26.04.01", "B300"),
            {"cuda_graph_scopes": ATTN_ROUTER, "moe_dispatcher": "flex"},
        ),
        # row 127 (26.06, v0.5.0) GB300 MXFP8: full-iteration graphs, fused grouped MLP,
        # GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2's fp8_dot_product_attention.
        (
            row("MBRIDGE-26.06", "GB300 (NVL72)", "MXFP8"),
            {
                "cuda_graph_scopes": frozenset({"full_iteration"}),
                "moe_dispatcher": "flex",
                "moe_a2a_overlap": True,
                "moe_fused_grouped_mlp": True,
                "fp8_attention": True,
            },
        ),
        # row 129: B300's MXFP8 config is its BF16 V2 config.
        (
            row("MBRIDGE-26.06", "B300", "MXFP8"),
            {"cuda_graph_scopes": ATTN_ROUTER, "moe_dispatcher": "flex"},
        ),
    ],
)
def test_gpt_oss_rows_carry_their_releases_runtime(raw, expected):
    # YaRN without yarn_mscale: Megatron-core runs the unfused RoPE in every release.
    assert oss.gpt_oss_runtime_fields(raw) == {"rope_fusion": False} | expected


def test_gb200_and_b200_recompute_layernorm_and_moe_act_except_full_iteration_mxfp8():
    assert oss.gpt_oss_saver_fields(row("MBRIDGE-26.02", "GB200 (NVL72)")) == SELECTIVE
    assert oss.gpt_oss_saver_fields(row("MBRIDGE-25.11", "B200")) == SELECTIVE
    assert oss.gpt_oss_saver_fields(row("MBRIDGE-26.02", "GB300 (NVL72)")) == {}
    # 26.06 GB200 MXFP8 V2: recompute_modules=[]
    assert oss.gpt_oss_saver_fields(row("MBRIDGE-26.06", "GB200 (NVL72)", "MXFP8")) == {}


def test_26_06_mxfp8_gb200_and_gb300_run_fp8_attention_and_b300_does_not():
    # GPT_OSS_120B_PRETRAIN_CONFIG_{GB300,GB200}_FP8_MX_V2 set fp8_dot_product_attention;
    # B300's MXFP8 V2 config is its BF16 one (rows 127-129); v0.5.1 (26.06.01) keeps them.
    for source in ("MBRIDGE-26.06", "MBRIDGE-26.06.01"):
        for gpu in ("GB300 (NVL72)", "GB200 (NVL72)"):
            assert oss.gpt_oss_runtime_fields(row(source, gpu, "MXFP8"))["fp8_attention"]
    assert "fp8_attention" not in oss.gpt_oss_runtime_fields(row("MBRIDGE-26.06", "B300", "MXFP8"))
    assert "fp8_attention" not in oss.gpt_oss_runtime_fields(row("MBRIDGE-26.04", "GB200 (NVL72)"))


def test_other_models_and_sources_get_nothing():
    qwen = row("MBRIDGE-26.02", "GB200 (NVL72)") | {"model": "Qwen3_30B_a3B"}
    assert oss.gpt_oss_runtime_fields(qwen) == {}
    assert oss.gpt_oss_saver_fields(qwen) == {}
    other = row("MOEZOO-QWEN3-GB200", "GB200 (NVL72)")
    assert oss.gpt_oss_runtime_fields(other) == {}


def test_the_row_case_carries_the_recipe():
    case = rows_mod.case_for_row(
        row("MBRIDGE-26.02", "GB200 (NVL72)")
        | {
            "arch_notes": "kv_channels 64; alternating sliding-window (128) attention",
            **GPT_OSS_120B_SHAPE,
            "num_gpus": "64",
            "tp": "1",
            "pp": "1",
            "cp": "1",
            "ep": "64",
            "micro_batch_size": "4",
            "global_batch_size": "1280",
        }
    )
    assert case.plan.recompute == "selective"
    assert case.plan.recompute_modules == ("layernorm", "moe_act")
    assert case.options.rope_fusion is False and case.options.moe_dispatcher == "alltoall"
