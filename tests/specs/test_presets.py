"""Tests of the model preset registry: every preset builds and round-trips, a miss lists
the valid names, and the dimensions reproduce published parameter counts."""

from __future__ import annotations

import pytest

from specs import serde
from specs.errors import SpecError
from specs.model import ModelSpec
from specs.presets import PRESETS, get_preset, preset_names

REQUIRED = [
    "tiny",
    "tiny-gelu",
    "tiny-moe",
    "gpt-1.7b",
    "gpt-3.6b",
    "gpt-7.5b",
    "gpt-18.4b",
    "gpt-39.1b",
    "gpt-76.1b",
    "gpt-145.6b",
    "gpt-310.1b",
    "gpt-529.6b",
    "gpt-1t",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3.1-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "nemotron-4-340b",
]


def weight_counts(m: ModelSpec) -> tuple[int, int]:
    """(total, active) weights by Megatron's counting (megatron-facts.md §2.1): linear
    weights, router, embeddings (twice when untied) and learned positions; biases and norm
    vectors are left out, as Megatron's estimator does. Active counts top-k experts."""
    h, a = m.hidden_size, m.num_attention_heads
    if m.uses_mla:
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        q = h * m.q_lora_rank + m.q_lora_rank * a * qk if m.q_lora_rank else h * a * qk
        kv = h * (m.kv_lora_rank + m.qk_pos_emb_head_dim)
        kv += m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim)
        attention = q + kv + a * m.v_head_dim * h
    else:
        d, g = m.head_dim, m.query_groups
        attention = h * (a * d + 2 * g * d) + a * d * h
    mats = 3 if m.activation == "swiglu" else 2
    expert = mats * h * m.expert_ffn_hidden_size
    shared = mats * h * m.moe_shared_expert_size
    total = active = 0
    for is_moe in m.moe_layer_mask():
        if is_moe:
            total += attention + m.num_experts * (expert + h) + shared
            active += attention + m.moe_top_k * expert + m.num_experts * h + shared
        else:
            dense = attention + mats * h * m.ffn_hidden_size
            total += dense
            active += dense
    embedding = m.vocab_size * h * (1 if m.tied_embeddings else 2)
    if m.position_embedding == "learned":
        embedding += m.max_position_embeddings * h
    return total + embedding, active + embedding


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_builds_and_round_trips(name: str) -> None:
    spec = get_preset(name)
    assert spec.name == name
    assert serde.loads(ModelSpec, serde.dumps(spec)) == spec
    assert serde.from_dict(ModelSpec, serde.to_dict(spec)) == spec


@pytest.mark.parametrize("name", preset_names())
def test_presets_are_in_canonical_form(name: str) -> None:
    # Shared with specs.hf_import: redundant values stay None, so imports equal presets.
    spec = get_preset(name)
    assert spec.num_query_groups != spec.num_attention_heads
    if spec.kv_channels is not None:
        assert spec.kv_channels * spec.num_attention_heads != spec.hidden_size
    assert spec.moe_ffn_hidden_size != spec.ffn_hidden_size


def test_registry_holds_the_required_presets_in_order() -> None:
    names = preset_names()
    assert names == list(PRESETS)
    assert [n for n in names if n in REQUIRED] == REQUIRED
    assert len(set(names)) == len(names)


def test_each_call_builds_an_equal_spec() -> None:
    assert get_preset("llama3-8b") == get_preset("llama3-8b")
    assert PRESETS["llama3-8b"]() == get_preset("llama3-8b")


def test_miss_lists_valid_names_and_suggests_a_close_one() -> None:
    with pytest.raises(SpecError) as info:
        get_preset("llama3-8")
    message = str(info.value)
    assert "unknown model preset 'llama3-8'" in message
    assert "did you mean 'llama3-8b'?" in message
    for name in preset_names():
        assert name in message


def test_miss_without_close_match_still_lists_names() -> None:
    with pytest.raises(SpecError, match=r"valid: .*tiny-moe") as info:
        get_preset("zzzzzz")
    assert "did you mean" not in str(info.value)


# Narayanan et al. 2021 (SC21), Table 1: (layers, hidden, heads, published size in billions).
SC21_TABLE_1 = {
    "gpt-1.7b": (24, 2304, 24, 1.7),
    "gpt-3.6b": (30, 3072, 32, 3.6),
    "gpt-7.5b": (36, 4096, 32, 7.5),
    "gpt-18.4b": (40, 6144, 48, 18.4),
    "gpt-39.1b": (48, 8192, 64, 39.1),
    "gpt-76.1b": (60, 10240, 80, 76.1),
    "gpt-145.6b": (80, 12288, 96, 145.6),
    "gpt-310.1b": (96, 16384, 128, 310.1),
    "gpt-529.6b": (105, 20480, 128, 529.6),
    "gpt-1t": (128, 25600, 160, 1008.0),
}


@pytest.mark.parametrize("name", list(SC21_TABLE_1))
def test_sc21_gpt_rows(name: str) -> None:
    layers, hidden, heads, billions = SC21_TABLE_1[name]
    spec = get_preset(name)
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads) == (layers, hidden, heads)
    assert spec.ffn_hidden_size == 4 * hidden
    assert spec.vocab_size == 51200
    assert spec.query_groups == heads
    assert (spec.activation, spec.normalization) == ("gelu", "layernorm")
    assert (spec.position_embedding, spec.max_position_embeddings) == ("learned", 2048)
    assert spec.tied_embeddings and spec.add_bias_linear
    # The paper's parameter formula (SC21 §5.1): P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)),
    # whose value the table prints to one decimal.
    p = 12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (51200 + 2048) / (12 * layers * hidden))
    assert abs(p / 1e9 - billions) <= 0.05


# Published totals (and active counts for MoE), in billions: Meta's Llama 2/3/3.1 model
# cards (Llama 2 7B 6.74, 13B 13.02, 70B 68.98 from the HF safetensors metadata), Mistral's
# Mixtral announcements (46.7/12.9, 141/39), Qwen3 model cards (30.5/3.3, 235/22),
# DeepSeek-V3 report (671/37, main model without the MTP module), Nemotron-4 340B report
# (341B in its HF card).
PUBLISHED = {
    "llama2-7b": (6.74, None),
    "llama2-13b": (13.02, None),
    "llama2-70b": (68.98, None),
    "llama3-8b": (8.03, None),
    "llama3-70b": (70.55, None),
    "llama3.1-405b": (405.85, None),
    "mixtral-8x7b": (46.70, 12.88),
    "mixtral-8x22b": (141.0, 39.0),
    "qwen3-30b-a3b": (30.5, 3.3),
    "qwen3-235b-a22b": (235.0, 22.0),
    "deepseek-v3": (671.0, 37.0),
    "nemotron-4-340b": (341.0, None),
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_parameter_counts(name: str) -> None:
    total, active = weight_counts(get_preset(name))
    want_total, want_active = PUBLISHED[name]
    # Within the rounding of the published figure (2% of the smallest, 3.3B active) plus
    # the few norm/bias vectors this count leaves out.
    assert total / 1e9 == pytest.approx(want_total, rel=0.006)
    if want_active is not None:
        assert active / 1e9 == pytest.approx(want_active, rel=0.02)


def test_tiny_presets_are_tiny() -> None:
    for name in ("tiny", "tiny-gelu", "tiny-moe"):
        spec = get_preset(name)
        assert spec.num_layers <= 4
        assert 64 <= spec.hidden_size <= 256
        assert weight_counts(spec)[0] < 3_000_000
    assert get_preset("tiny").query_groups < get_preset("tiny").num_attention_heads
    gelu = get_preset("tiny-gelu")
    assert (gelu.activation, gelu.normalization, gelu.tied_embeddings) == (
        "gelu",
        "layernorm",
        True,
    )
    assert gelu.query_groups == gelu.num_attention_heads
    moe = get_preset("tiny-moe")
    assert moe.is_moe and moe.moe_top_k == 2 and moe.moe_shared_expert_size > 0


def test_architecture_details_of_the_large_presets() -> None:
    qwen = get_preset("qwen3-235b-a22b")
    assert qwen.head_dim == 128 and qwen.hidden_size // qwen.num_attention_heads == 64
    assert get_preset("qwen3-30b-a3b").head_dim == 128
    ds = get_preset("deepseek-v3")
    assert ds.uses_mla and ds.q_lora_rank == 1536 and ds.kv_lora_rank == 512
    assert (ds.qk_head_dim, ds.qk_pos_emb_head_dim, ds.v_head_dim) == (128, 64, 128)
    assert ds.moe_layer_mask()[:4] == (False, False, False, True)
    assert ds.num_moe_layers == 58
    assert (ds.num_experts, ds.moe_top_k, ds.moe_shared_expert_size) == (256, 8, 2048)
    nemotron = get_preset("nemotron-4-340b")
    assert nemotron.activation == "gelu" and nemotron.position_embedding == "rope"
    assert not nemotron.tied_embeddings
    for name in ("llama3-8b", "llama3.1-405b", "mixtral-8x7b", "deepseek-v3"):
        assert not get_preset(name).tied_embeddings
