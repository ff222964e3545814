"""Multi-token prediction on hybrid models (`specs.mtp_checks`, `specs.params`): the rules
and their refusals, the layer kinds of a depth, and the parameters of a depth with and
without repeated weights, worked by hand."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from specs.layer_kinds import DENSE_LAYER, HYBRID_SYMBOLS, MOE_LAYER
from specs.model import ModelSpec
from specs.params import count_params, held_mtp_layers
from specs.presets import get_preset
from specs.serde import from_dict, to_dict

NANO = get_preset("nemotron-3-nano")
ATTENTION, MOE = HYBRID_SYMBOLS["*"], HYBRID_SYMBOLS["E"]


def nano_mtp(depths: int = 1, *, repeated: bool = False, pattern: str = "*E") -> ModelSpec:
    return NANO.replace(
        mtp_num_layers=depths, mtp_hybrid_pattern=pattern, mtp_repeated_layer=repeated
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mtp_repeated_layer": True}, "mtp_repeated_layer is set but mtp_num_layers is 0"),
        ({"mtp_hybrid_pattern": "*E"}, "mtp_hybrid_pattern '*E' is set but mtp_num_layers is 0"),
        ({"mtp_num_layers": 1}, "needs the layers of one MTP depth"),
        ({"mtp_num_layers": 1, "mtp_hybrid_pattern": ""}, "mtp_hybrid_pattern is empty"),
        ({"mtp_num_layers": 1, "mtp_hybrid_pattern": "*X"}, "unknown symbols 'X'"),
        ({"mtp_num_layers": 1, "mtp_hybrid_pattern": "*|E"}, "holds '|'"),
        ({"mtp_num_layers": 2, "mtp_hybrid_pattern": "*E/*E"}, "holds '/'"),
    ],
)
def test_hybrid_mtp_refusals(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("|", r"\|").replace("*", r"\*")):
        NANO.replace(**changes)


def test_a_depth_pattern_is_refused_on_a_transformer() -> None:
    with pytest.raises(SpecError, match="set on a transformer"):
        get_preset("deepseek-v3").replace(mtp_hybrid_pattern="*E")


def test_experts_in_a_depth_need_experts_in_the_model() -> None:
    dense = get_preset("nemotron-h-8b")
    assert dense.replace(mtp_num_layers=1, mtp_hybrid_pattern="*-").mtp_depth_kinds()
    with pytest.raises(SpecError, match=r"has E \(routed-expert\) layers but num_experts is 0"):
        dense.replace(mtp_num_layers=1, mtp_hybrid_pattern="*E")


def test_a_slash_in_the_main_pattern_names_the_mtp_fields() -> None:
    with pytest.raises(SpecError, match="set mtp_hybrid_pattern and mtp_num_layers"):
        NANO.replace(hybrid_layer_pattern=NANO.hybrid_layer_pattern + "/*E")


def test_depth_kinds_of_a_transformer_and_of_a_hybrid_model() -> None:
    assert get_preset("deepseek-v3").mtp_depth_kinds() == (MOE_LAYER,)
    assert get_preset("llama3-8b").replace(mtp_num_layers=1).mtp_depth_kinds() == (DENSE_LAYER,)
    assert get_preset("llama3-8b").mtp_depth_kinds() == ()
    assert nano_mtp(2).mtp_depth_kinds() == (ATTENTION, MOE)
    assert NANO.mtp_depth_kinds() == ()


def test_mtp_fields_round_trip_through_json() -> None:
    model = nano_mtp(2, repeated=True)
    assert from_dict(ModelSpec, to_dict(model)) == model


def test_nano_depth_of_attention_and_experts_worked_by_hand() -> None:
    # Nemotron 3 Nano (specs.preset_hybrid): h 2688, 32 heads of 128, 2 query groups, 128
    # experts of 1856, shared expert 3712, squared-ReLU (two matrices) MLPs, RMSNorm.
    # One "*E" depth (Megatron MultiTokenPredictionLayer with a HybridStack of "*E"):
    #   *  attention  2688·(4096 + 2·256) + 4096·2688 = 23,396,352, pre-norm 2688
    #   E  experts    128·2·2688·1856 = 1,277,165,568, shared 2·2688·3712 = 19,955,712,
    #                 router 2688·128 = 344,064, pre-norm 2688
    #   eh_proj       2·2688·2688 = 14,450,688
    #   enorm, hnorm, final_layernorm  3·2688 = 8064
    #   total         1,335,325,824
    counts = count_params(nano_mtp(1))
    (depth,) = counts.mtp_layers
    attention, experts = depth.layers
    assert (attention.attention, attention.norms) == (23_396_352, 2688)
    assert (experts.routed_experts, experts.mlp, experts.router) == (
        1_277_165_568,
        19_955_712,
        344_064,
    )
    assert (depth.projection, depth.norms) == (14_450_688, 8064)
    assert depth.total == counts.mtp == 1_335_325_824
    assert counts.total == count_params(NANO).total + 1_335_325_824


def test_repeated_weights_are_counted_once_and_computed_per_depth() -> None:
    one, two = count_params(nano_mtp(1)), count_params(nano_mtp(2))
    shared = count_params(nano_mtp(2, repeated=True))
    assert two.mtp == 2 * one.mtp
    assert shared.mtp == one.mtp and shared.total == one.total
    assert len(shared.mtp_layers) == 2  # what runs: two depths
    assert shared.mtp_weights(2) == shared.mtp_layers[:1]  # what is held: one set
    assert two.mtp_weights(2) == two.mtp_layers
    assert shared.mtp_weights(0) == ()
    assert held_mtp_layers(nano_mtp(2, repeated=True), 2) == 2  # * and E once
    assert held_mtp_layers(nano_mtp(2), 2) == 4
    assert held_mtp_layers(get_preset("deepseek-v3"), 1) == 1


def test_nemotron_3_super_depth_parts() -> None:
    # Nemotron 3 Super's MTP block totals 2,942,324,736 parameters in its Hugging Face
    # safetensors header (mtp.* tensors): an attention layer, a latent-MoE layer, eh_proj
    # and the norms, one set of weights for both depths:
    #   attention  4096·4096 (q) + 2·4096·256 (k, v) + 4096·4096 (o) = 35,651,584,
    #              pre-norm 4096
    #   eh_proj    2·4096·4096 = 33,554,432
    #   enorm, hnorm, final_layernorm  3·4096 = 12,288
    # leaving 2,942,324,736 - 35,655,680 - 33,554,432 - 12,288 = 2,873,102,336 for the
    # latent-MoE layer with its pre-norm.
    counts = count_params(get_preset("nemotron-3-super"))
    attention = counts.mtp_layers[0].layers[0]
    assert attention.attention == 35_651_584 and attention.norms == 4096
    assert counts.mtp_layers[0].projection == 33_554_432
    assert counts.mtp_layers[0].norms == 12_288
    experts = counts.mtp_layers[0].layers[1]
    assert experts.total == 2_873_102_336
    assert counts.mtp == 35_655_680 + 33_554_432 + 12_288 + experts.total  # held once
