"""Parameter counts (specs.params) against published model sizes and closed forms."""

from __future__ import annotations

import dataclasses

import pytest

from specs import ModelSpec, SpecError
from specs.params import LayerParams, count_params, padded_vocab_size
from specs.presets import get_preset

# (preset, total, active, relative tolerance). Sources:
# - llama3-8b / llama3-70b / llama3.1-405b: the Hugging Face checkpoints' parameter counts
#   (8,030,261,248; 70,553,706,496; 405,853,388,800), meta-llama model cards.
# - mixtral-8x7b: Mistral AI, "Mixtral of experts" (arXiv 2401.04088): 46.7B total, 12.9B
#   active; HF checkpoint 46,702,792,704.
# - qwen3-235b-a22b: Qwen3 technical report (arXiv 2505.09388), 235B total, 22B activated.
# - deepseek-v3: DeepSeek-V3 technical report (arXiv 2412.19437), 671B total, 37B activated
#   (main model, without the 14B multi-token-prediction module).
PUBLISHED = [
    ("llama3-8b", 8.03e9, 8.03e9, 0.005),
    ("llama3-70b", 70.55e9, 70.55e9, 0.005),
    ("llama3.1-405b", 405.85e9, 405.85e9, 0.005),
    ("mixtral-8x7b", 46.70e9, 12.88e9, 0.005),
    ("qwen3-235b-a22b", 235e9, 22e9, 0.02),
    ("deepseek-v3", 671e9, 37e9, 0.02),
]


@pytest.mark.parametrize(("name", "total", "active", "rel"), PUBLISHED)
def test_published_parameter_counts(name: str, total: float, active: float, rel: float) -> None:
    counts = count_params(get_preset(name))
    assert counts.main_total == pytest.approx(total, rel=rel)
    assert counts.active == pytest.approx(active, rel=rel)


def test_deepseek_v3_total_with_its_mtp_module() -> None:
    """DeepSeek-V3's Hugging Face card: "685B, which includes 671B of the Main Model weights
    and 14B of the Multi-Token Prediction (MTP) Module weights" (deepseek-ai/DeepSeek-V3
    README). The checkpoint's MTP module (layer 61) stores its own copy of the embedding
    and the output head, which Megatron shares with the main model; with those copies
    added, the total and the MTP part are within 0.6B of the published figures, which the
    card rounds to whole billions."""
    model = get_preset("deepseek-v3")
    counts = count_params(model)
    copies = counts.embedding + counts.output_layer
    assert model.mtp_num_layers == 1
    assert counts.main_total / 1e9 == pytest.approx(671, abs=0.5)
    assert (counts.total + copies) / 1e9 == pytest.approx(685, abs=0.6)
    assert (counts.mtp + copies) / 1e9 == pytest.approx(14, abs=0.6)
    assert counts.total == counts.main_total + counts.mtp


def test_mtp_depth_is_a_projection_three_norms_and_a_last_kind_layer() -> None:
    """Megatron's `MultiTokenPredictionLayer`: enorm, hnorm, eh_proj (2h x h), one
    transformer layer (here the last decoder layer's kind, MoE) and a final norm."""
    model = get_preset("deepseek-v3")
    counts = count_params(model)
    depth = counts.mtp_layers[0]
    h = model.hidden_size
    assert depth.projection == 2 * h * h
    assert depth.norms == 3 * h
    assert depth.layers == (counts.layers[-1],) and depth.layers[0].is_moe
    deeper = count_params(dataclasses.replace(model, mtp_num_layers=2))
    assert deeper.mtp == 2 * counts.mtp
    assert count_params(get_preset("llama3-8b")).mtp_layers == ()


def test_llama2_7b_matches_checkpoint_exactly() -> None:
    # meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters (sum of the safetensors shapes).
    assert count_params(get_preset("llama2-7b")).total == 6_738_415_616


# SC21 Table 1 (Narayanan et al. 2021, arXiv 2104.04473) names each model by its size in
# billions with one decimal; the count must round to exactly that.
SC21_ROWS = [
    ("gpt-1.7b", 1.7),
    ("gpt-3.6b", 3.6),
    ("gpt-7.5b", 7.5),
    ("gpt-18.4b", 18.4),
    ("gpt-39.1b", 39.1),
    ("gpt-76.1b", 76.1),
    ("gpt-145.6b", 145.6),
    ("gpt-310.1b", 310.1),
    ("gpt-529.6b", 529.6),
    ("gpt-1t", 1008.0),
]


@pytest.mark.parametrize(("name", "billions"), SC21_ROWS)
def test_sc21_table_sizes(name: str, billions: float) -> None:
    assert round(count_params(get_preset(name)).total / 1e9, 1) == billions


def test_sc21_closed_form_with_biases_and_positions() -> None:
    # SC21 §5.1: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) for a GPT with biases,
    # LayerNorm, learned positions and tied embeddings; the paper leaves out the final
    # LayerNorm (2h).
    model = get_preset("gpt-7.5b")
    layers, h, v, s = model.num_layers, model.hidden_size, model.vocab_size, 2048
    closed = 12 * layers * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * layers * h))
    assert count_params(model).total == pytest.approx(closed + 2 * h, rel=1e-12)


def test_classic_gpt_closed_form_without_biases() -> None:
    # params ≈ 12·L·h² + V·h for a GELU multi-head model with F = 4h and tied embeddings;
    # the only remainder is the norms (2 RMSNorms per layer + the final one).
    model = ModelSpec(
        name="gpt-classic",
        num_layers=12,
        hidden_size=768,
        num_attention_heads=12,
        ffn_hidden_size=3072,
        vocab_size=50257,
        activation="gelu",
        tied_embeddings=True,
    )
    counts = count_params(model)
    layers, h, v = 12, 768, 50257
    assert counts.total - (2 * layers + 1) * h == 12 * layers * h * h + v * h
    assert counts.output_layer == 0


def test_layer_split_llama3_8b() -> None:
    # h = 4096, 32 heads, 8 KV groups of 128: QKV 4096 x 6144, output 4096 x 4096.
    layer = count_params(get_preset("llama3-8b")).layers[0]
    assert layer.attention == 4096 * 6144 + 4096 * 4096
    assert layer.mlp == 3 * 4096 * 14336
    assert layer.norms == 2 * 4096
    assert (layer.routed_experts, layer.router, layer.is_moe) == (0, 0, False)


def test_deepseek_v3_mla_matches_checkpoint_shapes() -> None:
    # deepseek-ai/DeepSeek-V3 safetensors shapes of one layer's attention:
    # q_a_proj [1536, 7168], q_b_proj [24576, 1536], kv_a_proj_with_mqa [576, 7168],
    # kv_b_proj [32768, 512], o_proj [7168, 16384]; q_a_layernorm [1536], kv_a_layernorm [512].
    counts = count_params(get_preset("deepseek-v3"))
    # q_a and kv_a are replicated over tp (TELinear parallel_mode="duplicated",
    # MLASelfAttention.__init__), the rest of the attention split over tp
    down = 1536 * 7168 + 576 * 7168
    split = 24576 * 1536 + 32768 * 512 + 7168 * 16384
    dense, moe = counts.layers[0], counts.layers[3]
    assert dense.attention == moe.attention == split
    assert dense.latent_down_projections == moe.latent_down_projections == down
    assert dense.norms == 2 * 7168 + 1536 + 512
    assert not dense.is_moe and dense.mlp == 3 * 7168 * 18432
    # 256 routed experts and one shared expert of 2048, router 7168 x 256.
    assert moe.is_moe and moe.routed_experts == 256 * 3 * 7168 * 2048
    assert moe.mlp == 3 * 7168 * 2048 and moe.router == 7168 * 256
    assert sum(layer.is_moe for layer in counts.layers) == 58


def test_mla_without_query_compression_uses_one_query_projection() -> None:
    with_lora = get_preset("deepseek-v3")
    without = with_lora.replace(q_lora_rank=None)
    a_with = count_params(with_lora).layers[0]
    a_without = count_params(without).layers[0]
    # q_a (7168 x 1536, replicated) and q_b (1536 x 24576) against one q (7168 x 24576)
    assert a_with.latent_down_projections - a_without.latent_down_projections == 1536 * 7168
    assert a_with.attention - a_without.attention == 24576 * 1536 - 7168 * 24576
    assert a_with.norms - a_without.norms == 1536


def test_active_counts_top_k_experts_per_layer() -> None:
    model = get_preset("tiny-moe")
    counts = count_params(model)
    layer = counts.layers[0]
    per_expert = layer.routed_experts // model.num_experts
    assert layer.active(model) == layer.total - (model.num_experts - model.moe_top_k) * per_expert
    assert counts.active == counts.total - sum(
        layer.total - layer.active(model) for layer in counts.layers
    )
    # the shared expert is always active and TP-sharded like a dense MLP
    assert layer.mlp == 3 * 128 * 128


def test_dense_model_active_equals_total() -> None:
    counts = count_params(get_preset("llama3-70b"))
    assert counts.active == counts.total


def test_moe_layer_frequency_and_leading_dense_layers() -> None:
    model = get_preset("tiny-moe").replace(moe_layer_freq=2, moe_first_dense_layers=1)
    layers = count_params(model).layers
    assert [layer.is_moe for layer in layers] == [False, True, False, True]
    assert layers[0].mlp == 3 * 128 * 256 and layers[0].router == 0


def test_biases_and_layernorm() -> None:
    base = get_preset("tiny")
    h, q, kv, f = 128, 128, 64, 256
    qkv_only = count_params(base.replace(add_qkv_bias=True)).layers[0]
    plain = count_params(base).layers[0]
    assert qkv_only.attention - plain.attention == q + 2 * kv
    every = count_params(base.replace(add_bias_linear=True)).layers[0]
    assert every.attention - plain.attention == q + 2 * kv + h
    assert every.mlp - plain.mlp == 2 * f + h  # SwiGLU gate+up bias, down bias
    ln = count_params(base.replace(normalization="layernorm"))
    assert ln.layers[0].norms == 4 * h and ln.final_norm == 2 * h


def test_embedding_tables() -> None:
    gpt = count_params(get_preset("tiny-gelu"))
    assert gpt.embedding == 512 * 128 + 1024 * 128  # learned positions
    assert gpt.output_layer == 0  # tied
    llama = count_params(get_preset("tiny"))
    assert llama.embedding == llama.output_layer == 512 * 128


def test_counts_are_frozen() -> None:
    layer = count_params(get_preset("tiny")).layers[0]
    assert isinstance(layer, LayerParams)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.attention = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("vocab", "tp", "expected"),
    [
        # GPT-2's 50257 tokens pad to 50304 (Megatron default multiple 128) and to 51200
        # with tp = 8 (multiple 1024); Llama 3's 128256 is already a multiple of 128.
        (50257, 1, 50304),
        (50257, 8, 51200),
        (128256, 1, 128256),
        (128256, 8, 129024),
    ],
)
def test_padded_vocab_size(vocab: int, tp: int, expected: int) -> None:
    assert padded_vocab_size(vocab, tp) == expected


def test_padded_vocab_size_rejects_bad_input() -> None:
    with pytest.raises(SpecError, match="tp"):
        padded_vocab_size(1000, 0)
    assert padded_vocab_size(1000, 1, multiple=64) == 1024
