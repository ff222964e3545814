"""Tests of the Qwen3-Next preset and of gated DeltaNet layers in the specs: the pattern
symbol ``G``, the ``linear_*`` and output-gate fields and their checks, the parameter
counts worked from the config, and the executor refusal of output gates."""

from __future__ import annotations

import pytest

from specs.attention_params import attention_params
from specs.errors import SpecError
from specs.gdn_checks import EXECUTOR_GATE_RULE, executor_gate_refusal, has_gdn
from specs.hybrid_checks import executor_hybrid_refusal
from specs.layer_kinds import HYBRID_SYMBOLS, LayerKind, parse_hybrid_pattern
from specs.mixer_params import gdn_mixer_params
from specs.params import count_params
from specs.presets import get_preset

QWEN3_NEXT = "qwen3-next-80b-a3b"


def test_g_is_a_gated_deltanet_layer() -> None:
    assert HYBRID_SYMBOLS["G"] == LayerKind(mixer="gdn", mlp="none")
    assert HYBRID_SYMBOLS["G"].tag == "g"
    assert parse_hybrid_pattern("G*E-", num_layers=4, where="x")[0].mixer == "gdn"


def test_preset_takes_the_config_values() -> None:
    # Megatron-Bridge v0.6.0 test_qwen3_next_bridge.py qwen3_next_80b_a3b_config_dict
    m = get_preset(QWEN3_NEXT)
    kinds = m.layer_kinds()
    assert m.num_layers == 96 and len(kinds) == 96  # 48 layers, a mixer and an MoE block each
    mixers = [k.mixer for k in kinds[0::2]]
    assert mixers.count("attention") == 12 and mixers.count("gdn") == 36
    assert all(k.is_moe for k in kinds[1::2])
    assert [i for i, k in enumerate(mixers) if k == "attention"] == list(range(3, 48, 4))
    assert (m.hidden_size, m.num_attention_heads, m.query_groups, m.head_dim) == (2048, 16, 2, 256)
    assert (m.rotary_percent, m.rotary_base) == (0.25, 10_000_000)
    gdn = (m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim)
    assert (*gdn, m.linear_value_head_dim, m.linear_conv_kernel_dim) == (16, 32, 128, 128, 4)
    moe = (m.num_experts, m.moe_top_k, m.expert_ffn_hidden_size, m.moe_shared_expert_size)
    assert moe == (512, 10, 512, 512)
    assert m.vocab_size == 151936 and not m.tied_embeddings
    assert m.attention_output_gate and m.moe_shared_expert_gate and m.qk_layernorm
    assert m.layernorm_zero_centered_gamma  # Qwen3NextBridge.provider_bridge
    assert (m.mtp_num_layers, m.mtp_hybrid_pattern) == (1, "*E")
    assert m.router.moe_router_load_balancing_type == "global_aux_loss"


def test_gdn_mixer_parameters_from_the_config() -> None:
    # in_proj 2048·(2·2048 + 2·4096 + 2·32) = 25,296,896; conv1d (2·2048 + 4096)·4 = 32,768;
    # A_log, dt_bias 32 each; out_norm 128; out_proj 4096·2048 = 8,388,608
    assert gdn_mixer_params(get_preset(QWEN3_NEXT)) == 33_718_464


def test_gated_attention_doubles_the_query_columns() -> None:
    m = get_preset(QWEN3_NEXT)
    # qkv 2048·(2·4096 + 2·512) = 18,874,368; o_proj 4096·2048 = 8,388,608
    assert attention_params(m) == 27_262_976
    assert attention_params(m.replace(attention_output_gate=False)) == 27_262_976 - 2048 * 4096


def test_total_and_active_parameters() -> None:
    # Worked from the config (specs.params): embedding and output layer 2·151936·2048 =
    # 622,329,856 and the final norm 2048; 36 gated DeltaNets of 33,718,464 + a 2048 pre-norm
    # = 1,213,938,432; 12 gated attentions of 27,262,976 + 2048 = 327,180,288; 48 MoE blocks
    # of router 2048·512, 512 experts of 3·2048·512, a shared expert of 3·2048·512, its
    # 2048 gate and a 2048 pre-norm = 48·1,614,811,136 = 77,510,934,528.
    counts = count_params(get_preset(QWEN3_NEXT))
    assert counts.main_total == 79_674_385_152
    # active: 10 of the 512 experts, 48·(1,610,612,736 - 10·3,145,728) fewer
    assert counts.active == 3_874_923_264
    # one MTP depth: eh_proj 4096·2048, three norms, a gated attention and an MoE block
    assert counts.mtp == 8_388_608 + 3 * 2048 + 27_265_024 + 1_614_811_136
    # the model card's "80B total, 3B activated": the main model is 79.67e9 (the 12 attention
    # layers' q/k norms, 12·2·256 = 6,144 weights, are not counted); the active count holds
    # 0.62e9 of embedding and output layer, 3.25e9 without them
    assert round(counts.main_total / 1e9) == 80
    assert counts.active - 2 * 151936 * 2048 == 3_252_593_408


def test_value_heads_must_be_a_multiple_of_the_key_heads() -> None:
    m = get_preset(QWEN3_NEXT)
    with pytest.raises(SpecError, match=r"linear_num_value_heads \(24\).*linear_num_key_heads"):
        m.replace(linear_num_value_heads=24)
    # without G layers the net is not built, and its heads are not checked
    dense = get_preset("nemotron-h-8b").replace(linear_num_value_heads=24)
    assert not has_gdn(dense)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"linear_num_key_heads": 0}, "linear_num_key_heads"),
        ({"rotary_percent": 1.5}, r"rotary_percent must be in \(0, 1\]"),
        ({"moe_shared_expert_size": 0}, "moe_shared_expert_gate gates the shared expert"),
    ],
)
def test_invalid_gate_and_gdn_fields_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        get_preset(QWEN3_NEXT).replace(**changes)


def test_output_gate_on_mla_is_refused() -> None:
    mla = get_preset("deepseek-v3")
    with pytest.raises(SpecError, match="Output gate is not supported for MLA"):
        mla.replace(attention_output_gate=True)


def test_executor_refuses_output_gates_and_gdn_models() -> None:
    m = get_preset(QWEN3_NEXT)
    assert executor_hybrid_refusal(m) is not None
    gated = get_preset("qwen3-30b-a3b").replace(attention_output_gate=True)
    refusal = executor_gate_refusal(gated)
    assert refusal is not None and f"[{EXECUTOR_GATE_RULE}]" in refusal
    assert "attention_output_gate" in refusal and "--runtime megatron" in refusal
    assert executor_gate_refusal(get_preset("qwen3-30b-a3b")) is None
