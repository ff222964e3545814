"""bench/moe_recipes.py: the CUDA graph scopes, MoE dispatcher and token dropping each
Megatron-Bridge row carries, checked against the recipe files its module docstring cites
(rows named by their ``published-runs-dev.csv`` ids)."""

from __future__ import annotations

import pytest

from tests.bench.bench_loader import load_bench

moe = load_bench("moe_recipes")
rows_mod = load_bench("published_rows")
options_mod = load_bench("row_options")

ROUTER = frozenset({"moe_router", "moe_preprocess"})


def row(source: str, model: str, gpu: str, precision: str = "MXFP8") -> dict[str, str]:
    return {"source_id": source, "model": model, "gpu_type": gpu, "precision": precision}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # row 310: 26.02 tag v0.3.0, B200 at micro-batch 1, alltoall.
        (row("MBRIDGE-26.02", "Qwen3_30B_a3B", "B200"), ("alltoall", ROUTER)),
        # row 273: 26.02.01 (branch r0.3.0), B200 at micro-batch 4 with HybridEP.
        (row("MBRIDGE-26.02.01", "Qwen3_30B_a3B", "B200", "BF16"), ("flex", ROUTER | {"attn"})),
        # row 308: GB200 MXFP8, HybridEP, router and preprocess captured.
        (row("MBRIDGE-26.02", "Qwen3_30B_a3B", "GB200 (NVL72)"), ("flex", ROUTER)),
        # row 229: 26.04 B200 MXFP8, HybridEP, router and preprocess captured.
        (row("MBRIDGE-26.04", "Qwen3_30B_a3B", "B200"), ("flex", ROUTER)),
        # row 106: 26.06.01 GB300, v0.5.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1.
        (
            row("MBRIDGE-26.06.01", "Qwen3_30B_a3B", "GB300 (NVL72)"),
            ("flex", frozenset({"full_iteration"})),
        ),
    ],
)
def test_qwen3_30b_rows_carry_their_recipes_graphs_and_dispatcher(raw, expected):
    fields = moe.moe_runtime_fields(raw)
    assert (fields["moe_dispatcher"], fields["cuda_graph_scopes"]) == expected


def test_25_09_rows_capture_whole_layers_where_the_yaml_enables_graphs():
    whole = {"cuda_graph_scopes": frozenset({"layer"})}
    assert (
        moe.moe_runtime_fields(row("MBRIDGE-25.09", "Qwen3_30B_a3B (tokendrop)", "B200")) == whole
    )
    gb200_235b = row("MBRIDGE-25.09", "Qwen3_235B_a22B (tokendrop)", "GB200 (NVL72)")
    assert moe.moe_runtime_fields(gb200_235b) == whole
    # B200 235B and DeepSeek-V3 ran with cuda_graphs: false.
    assert moe.moe_runtime_fields(row("MBRIDGE-25.09", "Qwen3_235B_a22B (tokendrop)", "B200")) == {}
    assert moe.moe_runtime_fields(row("MBRIDGE-25.09", "DeepSeekV3 (tokendrop)", "B200")) == {}


def test_rows_no_recipe_covers_keep_the_defaults():
    # 26.04 (v0.4.0) B300 Qwen3 235B: no backend, no overlap.
    assert moe.moe_runtime_fields(row("MBRIDGE-26.04", "Qwen3_235B_a22B", "B300")) == {}


WHOLE = frozenset({"full_iteration"})
ATTN = ROUTER | {"attn"}


@pytest.mark.parametrize(
    ("raw", "dispatcher", "overlap", "scopes"),
    [
        # row 174: llmb-r0.4.1 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (DeepEP, A2A overlap).
        (row("MBRIDGE-26.04.01", "DeepSeekV3", "B200"), "flex", True, ATTN),
        # rows 124 and 125: v0.5.0 GB300 / GB200 FP8_MX_V1 (full_iteration graphs, overlap).
        (row("MBRIDGE-26.06", "DeepSeekV3", "GB300 (NVL72)"), "flex", True, WHOLE),
        (row("MBRIDGE-26.06.01", "DeepSeekV3", "GB200 (NVL72)"), "flex", True, WHOLE),
        # row 220: 26.04 B200 (v0.4.0 B200_V1: HybridEP, no overlap, eager).
        (row("MBRIDGE-26.04", "DeepSeekV3", "B200"), "flex", None, None),
        # row 173: 26.04.01 B300 (llmb-r0.4.1 B300_V2, pp 8, mbs 2): graphs as GB200's.
        (row("MBRIDGE-26.04.01", "DeepSeekV3", "B300"), "flex", None, ATTN),
        # row 262: 26.02.01 GB200: HybridEP with attn / router / preprocess graphs.
        (row("MBRIDGE-26.02.01", "DeepSeekV3", "GB200 (NVL72)"), "flex", None, ATTN),
        # row 330: 25.11 GB200 (v0.2.0: router and preprocess captured).
        (row("MBRIDGE-25.11", "DeepSeekV3 (w/o MTP)", "GB200 (NVL72)"), "flex", None, ROUTER),
        # row 339: 25.11 B200 sets no flex backend.
        (row("MBRIDGE-25.11", "DeepSeekV3 (w/ MTP)", "B200"), "alltoall", None, None),
        # rows 134 and 186: Qwen3 235B GB300 26.06 FP8_MX_V2, GB200 26.04.01.
        (row("MBRIDGE-26.06", "Qwen3_235B_a22B", "GB300 (NVL72)"), "flex", True, WHOLE),
        (row("MBRIDGE-26.04.01", "Qwen3_235B_a22B", "GB200 (NVL72)"), "flex", None, ATTN),
        # rows 342 and 314: B200 at 25.11 and B300 at 26.02 overlap the alltoall dispatcher.
        (row("MBRIDGE-25.11", "Qwen3_235B_a22B", "B200"), "alltoall", True, None),
        (row("MBRIDGE-26.02", "Qwen3_235B_a22B", "B300"), "alltoall", True, None),
        # row 277: 26.02.01 (branch llmb-r0.3.0) keeps v0.3.0's B300_FP8_MX_V2 (vpp 4, overlap).
        (row("MBRIDGE-26.02.01", "Qwen3_235B_a22B", "B300"), "alltoall", True, None),
        # row 187: llmb-r0.4.1 B300 HybridEP.
        (row("MBRIDGE-26.04.01", "Qwen3_235B_a22B", "B300"), "flex", None, None),
        # row 136: Kimi-K2 GB300, KIMI_K2_PRETRAIN_CONFIG_GB300 (HybridEP, no graphs).
        (row("MBRIDGE-26.06", "Kimi_K2", "GB300 (NVL72)"), "flex", None, None),
    ],
)
def test_large_moe_rows_carry_their_releases_dispatcher_overlap_and_graphs(
    raw, dispatcher, overlap, scopes
):
    fields = moe.moe_runtime_fields(raw)
    assert fields["moe_dispatcher"] == dispatcher
    assert fields.get("moe_a2a_overlap") == overlap
    assert fields.get("cuda_graph_scopes") == scopes


def test_tokendrop_large_moe_rows_keep_the_alltoall_dispatcher():
    assert moe.moe_runtime_fields(row("MBRIDGE-25.09", "DeepSeekV3 (tokendrop)", "GB200")) == {}
    options = options_mod.options_for_row(row("MBRIDGE-26.06", "DeepSeekV3", "GB300 (NVL72)"))
    assert options.moe_a2a_overlap and options.moe_dispatcher == "flex"


def test_tokendrop_rows_run_at_capacity_factor_one():
    assert moe.token_drop_capacity(row("MBRIDGE-25.09", "DeepSeekV3 (tokendrop)", "B200")) == 1.0
    assert moe.token_drop_capacity(row("MBRIDGE-26.02", "Qwen3_30B_a3B", "B200")) is None


def test_row_options_and_model_carry_the_recipe():
    raw = row("MBRIDGE-25.09", "Qwen3_30B_a3B (tokendrop)", "B200")
    options = options_mod.options_for_row(raw)
    assert options.cuda_graph_scopes == frozenset({"layer"})
    assert options.main_grad_bytes == options_mod.MEGATRON_BRIDGE_PERF.main_grad_bytes


@pytest.mark.parametrize(
    "raw",
    [
        # rows 130-132: v0.5.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_{GB300,GB200,B300}_FP8_MX_V1.
        row("MBRIDGE-26.06", "Qwen3_30B_a3B", "GB300 (NVL72)"),
        row("MBRIDGE-26.06", "Qwen3_30B_a3B", "GB200 (NVL72)"),
        row("MBRIDGE-26.06", "Qwen3_30B_a3B", "B300"),
        # rows 123 and 135: DeepSeek-V3 GB300 FP8_MX_V1, Qwen3 235B GB200 FP8_MX_V2.
        row("MBRIDGE-26.06", "DeepSeekV3", "GB300 (NVL72)"),
        row("MBRIDGE-26.06", "Qwen3_235B_a22B", "GB200 (NVL72)"),
    ],
)
def test_26_06_mxfp8_recipes_run_the_fused_grouped_mlp(raw):
    fields = moe.moe_runtime_fields(raw)
    assert fields["moe_fused_grouped_mlp"] is True
    assert fields["moe_a2a_overlap"] is True
    assert fields["cuda_graph_scopes"] == WHOLE
    assert options_mod.options_for_row(raw).moe_fused_grouped_mlp


@pytest.mark.parametrize(
    ("raw", "fp8_attention"),
    [
        # v0.5.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_{GB300,GB200,B300}_FP8_MX_V1 (rows 130-132)
        # and the 26.06.01 GB300 row 106 (v0.5.1 keeps the config).
        (row("MBRIDGE-26.06", "Qwen3_30B_a3B", "GB300 (NVL72)"), True),
        (row("MBRIDGE-26.06", "Qwen3_30B_a3B", "B300"), True),
        (row("MBRIDGE-26.06.01", "Qwen3_30B_a3B", "GB300 (NVL72)"), True),
        # QWEN3_235B_A22B_PRETRAIN_CONFIG_{GB300,GB200}_FP8_MX_V2 (rows 134, 135).
        (row("MBRIDGE-26.06", "Qwen3_235B_a22B", "GB300 (NVL72)"), True),
        (row("MBRIDGE-26.06", "Qwen3_235B_a22B", "GB200 (NVL72)"), True),
        # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V1 sets it (rows 123, 124, 102) ...
        (row("MBRIDGE-26.06", "DeepSeekV3", "GB300 (NVL72)"), True),
        (row("MBRIDGE-26.06.01", "DeepSeekV3", "GB300 (NVL72)"), True),
        # ... DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 does not (rows 125, 103).
        (row("MBRIDGE-26.06", "DeepSeekV3", "GB200 (NVL72)"), False),
        (row("MBRIDGE-26.06.01", "DeepSeekV3", "GB200 (NVL72)"), False),
        # DeepSeek-V3 B300 (B300_V2, no fused MLP) and the releases before v0.5.0.
        (row("MBRIDGE-26.06", "DeepSeekV3", "B300"), False),
        (row("MBRIDGE-26.04.01", "DeepSeekV3", "B200"), False),
        (row("MBRIDGE-26.04", "Qwen3_30B_a3B", "GB300 (NVL72)"), False),
        # 26.06 BF16 recipes keep bf16 attention.
        (row("MBRIDGE-26.06", "Qwen3_30B_a3B", "GB300 (NVL72)", "BF16"), False),
    ],
)
def test_26_06_mxfp8_recipes_that_set_fp8_dot_product_attention(raw, fp8_attention):
    assert moe.moe_runtime_fields(raw).get("fp8_attention", False) is fp8_attention
    assert options_mod.options_for_row(raw).fp8_attention is fp8_attention


def test_earlier_releases_keep_te_grouped_linear():
    for source in ("MBRIDGE-26.04", "MBRIDGE-26.04.01", "MBRIDGE-26.02"):
        fields = moe.moe_runtime_fields(row(source, "Qwen3_30B_a3B", "GB300 (NVL72)"))
        assert "moe_fused_grouped_mlp" not in fields
    # 26.06 BF16 recipes do not set cutedsl_fused_grouped_mlp.
    bf16 = moe.moe_runtime_fields(row("MBRIDGE-26.06", "Qwen3_30B_a3B", "GB300 (NVL72)", "BF16"))
    assert "moe_fused_grouped_mlp" not in bf16


def zoo(gpu: str, precision: str, seq: int) -> dict[str, str]:
    return row("MOEZOO-QWEN3-GB200", "Qwen3-235B-A22B", gpu, precision) | {"seq_length": str(seq)}


@pytest.mark.parametrize(
    ("raw", "graphs", "overlap"),
    [
        # row 390: Command (BF16): DISPATCHER=hybridep A2A_OVERLAP=0, attn moe_router moe_preprocess
        (zoo("GB200 (NVL72)", "BF16", 4096), ROUTER | {"attn"}, False),
        # row 391: Command (MXFP8): A2A_OVERLAP=1, the same graph scopes
        (zoo("GB200 (NVL72)", "MXFP8", 4096), ROUTER | {"attn"}, True),
        # row 392: Command (MXFP8, 128k long context): A2A_OVERLAP=0, no --cuda-graph-scope
        (zoo("GB200 (NVL72)", "MXFP8", 131072), None, False),
        # row 393: GB300 command: A2A_OVERLAP=1, attn moe_router moe_preprocess
        (zoo("GB300 (NVL72)", "MXFP8", 4096), ROUTER | {"attn"}, True),
    ],
)
def test_model_zoo_rows_carry_their_commands_dispatcher_graphs_and_overlap(raw, graphs, overlap):
    fields = moe.moe_runtime_fields(raw)
    assert fields["moe_dispatcher"] == "flex"  # DISPATCHER=hybridep -> flex
    assert fields.get("cuda_graph_scopes") == graphs
    assert fields.get("moe_a2a_overlap", False) is overlap
