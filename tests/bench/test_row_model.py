"""bench/row_model.py: the model of a published row, GPT-OSS's attention, norm and
embeddings, the query-key norms of Qwen3 and the hybrid presets of Nemotron 3 Nano and
Nemotron-H; rows from `tests.bench.published_row_cases`."""

from __future__ import annotations

import pytest

from specs.presets import get_preset
from tests.bench.bench_loader import load_bench
from tests.bench.published_row_cases import (
    GPT_OSS_B300,
    LLAMA405_GB200,
    NANO_GB300,
    ZERO3_SC21,
    row_with,
)

rows_mod = load_bench("published_rows")
model_mod = load_bench("row_model")


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


@pytest.mark.parametrize(
    ("model", "expected"), [("Qwen3_30B_a3B", True), ("Qwen3-235B-A22B", True)]
)
def test_qwen3_rows_normalize_query_and_key(model: str, expected: bool) -> None:
    assert model_mod.uses_qk_layernorm({"model": model}) is expected


def test_other_rows_have_no_query_key_norms() -> None:
    assert not rows_mod.case_for_row(LLAMA405_GB200).model.qk_layernorm
    assert not rows_mod.case_for_row(GPT_OSS_B300).model.qk_layernorm


def test_a_nano_row_without_architecture_columns_is_the_nano_preset():
    # Row 279 prints no architecture; Megatron-Bridge's Nemotron3NanoProvider is the
    # nemotron-3-nano preset (specs/preset_hybrid.py), under the row's model name.
    model = rows_mod.case_for_row(NANO_GB300).model
    assert model == get_preset("nemotron-3-nano").replace(name="Nemotron_3_Nano")
    assert model.is_hybrid and model.num_experts == 128 and model.num_query_groups == 2


@pytest.mark.parametrize(
    ("model", "preset"),
    [("Nemotron-H 56B", "nemotron-h-56b"), ("NemotronH_8B", "nemotron-h-8b")],
)
def test_a_nemotron_h_row_takes_the_preset_of_its_size(model, preset):
    raw = row_with(NANO_GB300, model=model, ep="n/a")
    assert model_mod.model_for(raw) == get_preset(preset).replace(name=model)


def test_a_hybrid_size_without_preset_stays_not_expressible():
    with pytest.raises(model_mod.NotExpressible, match="hybrid Mamba layers"):
        model_mod.model_for(row_with(NANO_GB300, model="Nemotron-H 4B"))


def test_a_stated_column_the_preset_contradicts_is_named():
    model_mod.model_for(row_with(NANO_GB300, num_layers="52", moe_top_k="6"))
    with pytest.raises(model_mod.NotExpressible, match="hidden_size '4096' stated"):
        model_mod.model_for(row_with(NANO_GB300, hidden_size="4096"))


def test_super_rows_take_their_preset():
    raw = row_with(NANO_GB300, model="Nemotron_3_Super", num_gpus="64", ep="64")
    model = model_mod.model_for(raw)
    assert model == get_preset("nemotron-3-super").replace(name="Nemotron_3_Super")


def test_neox_row_takes_the_parallel_block_and_rotary_positions():
    # row 432's architecture columns (EleutherAI/gpt-neox configs/20B.yml: gpt_j_residual
    # without gpt_j_tied, pos_emb rotary, no_weight_tying)
    raw = row_with(
        ZERO3_SC21,
        row_id="432",
        model="GPT-NeoX-20B",
        arch_notes="rotary (25% dims), parallel attn+MLP (gpt_j_residual), untied "
        "embeddings, ffn=4h",
        num_layers="44",
        hidden_size="6144",
        num_attention_heads="64",
        num_query_groups="64",
        ffn_hidden_size="24576",
        vocab_size="50257",
    )
    model = model_mod.model_for(raw)
    assert model.layer_block == "parallel"
    assert model.position_embedding == "rope" and not model.tied_embeddings
    assert model.activation == "gelu" and model.normalization == "layernorm"


def test_parallel_transformer_block_without_its_norms_stays_refused():
    raw = row_with(ZERO3_SC21, arch_notes="parallel transformer block (PTB)")
    with pytest.raises(model_mod.NotExpressible, match="norms"):
        model_mod.model_for(raw)


def test_relu_row_is_a_two_matrix_mlp_with_learned_positions():
    # row 431's architecture (OPT, Zhang et al. 2022 Sec 2.1: ReLU, ffn 4h, learned
    # positions, LayerNorm) with the vocabulary the row leaves empty stated as OPT's 50272
    raw = row_with(
        ZERO3_SC21,
        row_id="431",
        model="OPT-175B",
        arch_notes="GPT-3-style, ReLU, ffn=4h",
        num_layers="96",
        hidden_size="12288",
        num_attention_heads="96",
        num_query_groups="96",
        ffn_hidden_size="49152",
        vocab_size="50272",
    )
    relu = model_mod.model_for(raw)
    assert relu.activation == "gelu" and relu.normalization == "layernorm"
    assert relu.position_embedding == "learned"
    gelu = model_mod.model_for({**raw, "arch_notes": "GPT-3-style, GeLU, ffn=4h"})
    assert relu == gelu
