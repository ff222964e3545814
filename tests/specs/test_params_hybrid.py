"""Parameter counts (specs.params) of hybrid Mamba-2 models: the published sizes of the
Nemotron-H presets, one layer of each kind against Megatron-core's tensor shapes, and the
LayerParams part each weight is counted in."""

from __future__ import annotations

import pytest

from specs.mixer_params import mamba_mixer_params
from specs.params import count_params, mlp_params
from specs.presets import get_preset

# Published sizes, which the model cards state in whole billions:
# - nemotron-h-8b: Hugging Face collection nvidia/nemotron-h and the NeMo user guide
#   (docs.nvidia.com/nemo-framework/user-guide/25.07/llms/mamba.html: "models of 8B, 47B,
#   and 56B parameters");
# - nemotron-h-47b: nvidia/Nemotron-H-47B-Base-8K model card, "This model has 47B model
#   parameters";
# - nemotron-h-56b: nvidia/Nemotron-H-56B-Base-8K model card (and its NGC page), "This
#   model has 56B model parameters".
PUBLISHED_BILLIONS = [
    ("nemotron-h-8b", 8),
    ("nemotron-h-47b", 47),
    ("nemotron-h-56b", 56),
]


@pytest.mark.parametrize(("name", "billions"), PUBLISHED_BILLIONS)
def test_nemotron_h_totals_round_to_the_published_sizes(name: str, billions: int) -> None:
    counts = count_params(get_preset(name))
    assert round(counts.total / 1e9) == billions
    assert counts.active == counts.total  # dense: no routed experts
    assert counts.mtp_layers == ()


def test_nemotron_h_exact_totals() -> None:
    # Worked by hand from the layer shapes below: 24 M, 4 *, 24 - layers of h = 4096, and
    # 2 x 131072 x 4096 untied embeddings plus the final norm.
    h, vocab = 4096, 131072
    mamba = h + mamba_mixer_params(get_preset("nemotron-h-8b"))
    attention = h + h * (32 * 128 + 2 * 8 * 128) + 32 * 128 * h
    mlp = h + 2 * h * 21504
    total = 24 * mamba + 4 * attention + 24 * mlp + 2 * vocab * h + h
    assert count_params(get_preset("nemotron-h-8b")).total == total == 8_100_852_736
    assert count_params(get_preset("nemotron-h-56b")).total == 56_324_350_464
    assert count_params(get_preset("nemotron-h-47b")).total == 46_791_554_816


def test_nemotron_3_nano_total_and_active() -> None:
    """31.6B total, 3.2B active per token, 3.6B with the embeddings: NVIDIA's Nemotron 3
    Nano report as its public summaries quote it (the Hugging Face Hub lists
    nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 at 31.6B); Megatron-Bridge's docs round the
    active count to 3.5B. The router's per-expert score-correction bias (128 per E layer)
    is a buffer in Megatron and is not counted."""
    model = get_preset("nemotron-3-nano")
    counts = count_params(model)
    assert counts.total / 1e9 == pytest.approx(31.6, abs=0.05)
    assert counts.active / 1e9 == pytest.approx(3.6, abs=0.05)
    assert (counts.active - counts.embedding) / 1e9 == pytest.approx(3.2, abs=0.05)


def test_mamba_layer_matches_megatron_tensor_shapes() -> None:
    """One M layer of Nemotron-H 8B, by the parameters Megatron-core's MambaMixer creates
    (megatron/core/ssm/mamba_mixer.py, d98e8a64): in_proj [2·8192 + 2·8·128 + 128, 4096]
    (z, x, B, C, dt), conv1d weight [8192 + 2·8·128, 1, 4] and bias, A_log, D and dt_bias
    [128], the gated RMSNorm weight [8192], out_proj [4096, 8192]; the MambaLayer's
    pre-norm [4096] is the replicated part."""
    model = get_preset("nemotron-h-8b")
    assert (model.mamba_heads, model.mamba_inner_size) == (128, 8192)
    conv_channels = 8192 + 2 * 8 * 128
    mixer = 18560 * 4096 + conv_channels * 4 + conv_channels + 3 * 128 + 8192 + 4096 * 8192
    assert mamba_mixer_params(model) == mixer
    layer = count_params(model).layers[0]  # pattern "M-M-M-M*-...": layer 0 is M
    assert (layer.attention, layer.norms, layer.mlp) == (mixer, 4096, 0)
    assert (layer.routed_experts, layer.router, layer.is_moe) == (0, 0, False)


def test_single_part_layers_by_kind() -> None:
    model = get_preset("nemotron-h-8b")
    layers = count_params(model).layers
    mlp_layer, attention_layer = layers[1], layers[7]
    assert model.hybrid_layer_pattern is not None
    assert model.hybrid_layer_pattern[1] == "-" and model.hybrid_layer_pattern[7] == "*"
    # "-": its pre-norm and a squared-ReLU MLP h -> F -> h (two matrices, as gelu)
    assert (mlp_layer.attention, mlp_layer.norms) == (0, 4096)
    assert mlp_layer.mlp == 2 * 4096 * 21504 == mlp_params(model, 21504)
    # "*": its pre-norm and GQA projections, 32 heads and 8 groups of 128
    assert attention_layer.attention == 4096 * (4096 + 2 * 1024) + 4096 * 4096
    assert (attention_layer.norms, attention_layer.mlp) == (4096, 0)


def test_expert_layer_of_nemotron_3_nano() -> None:
    """An E layer: pre-norm, router h x 128, 128 routed experts of 1856 and the shared
    expert of 3712, squared-ReLU (two matrices each); no mixer."""
    model = get_preset("nemotron-3-nano")
    assert model.hybrid_layer_pattern is not None and model.hybrid_layer_pattern[1] == "E"
    layer = count_params(model).layers[1]
    h = 2688
    assert (layer.attention, layer.norms, layer.is_moe) == (0, h, True)
    assert layer.routed_experts == 128 * 2 * h * 1856
    assert layer.mlp == 2 * h * 3712 and layer.router == h * 128
    assert layer.active(model) == h + 6 * 2 * h * 1856 + 2 * h * 3712 + h * 128


def test_mamba_inner_width_follows_mamba_num_heads() -> None:
    # Nemotron 3 Nano: 64 heads of 64, d_inner 4096, not 2·2688
    model = get_preset("nemotron-3-nano")
    assert model.mamba_inner_size == 4096 != 2 * model.hidden_size
    layer = count_params(model).layers[0]
    in_proj = 2688 * (2 * 4096 + 2 * 8 * 128 + 64)
    conv = (4096 + 2048) * 5
    assert layer.attention == in_proj + conv + 3 * 64 + 4096 + 4096 * 2688


def test_mamba_mixer_has_no_linear_bias() -> None:
    # MambaMixer asserts not bias: add_bias_linear biases the attention and MLP layers only
    model = get_preset("nemotron-h-8b")
    biased = count_params(model.replace(add_bias_linear=True))
    plain = count_params(model)
    assert biased.layers[0].attention == plain.layers[0].attention
    assert biased.layers[1].mlp == plain.layers[1].mlp + 21504 + 4096


def test_published_layer_counts() -> None:
    """Nemotron-H 56B: "54 Mamba-2, 54 MLP, and 10 Self-Attention layers" (NVIDIA ADLR's
    Nemotron-H page); Nemotron 3 Nano: 23 Mamba-2 and 23 MoE layers with 6 attention
    layers (Megatron-Bridge docs, models/llm/nemotron3)."""
    for name, counts in (("nemotron-h-56b", (54, 10, 54, 0)), ("nemotron-3-nano", (23, 6, 0, 23))):
        pattern = get_preset(name).hybrid_layer_pattern or ""
        assert tuple(pattern.count(s) for s in "M*-E") == counts


def test_nemotron_3_super_matches_its_checkpoint() -> None:
    """The BF16 tensors of nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 (safetensors
    headers): 123,611,012,096 elements, of which 2,942,324,736 in the MTP block (one set of
    weights: enorm, hnorm, eh_proj, an attention and a latent-MoE layer, its final norm);
    the 41 routers' fp32 score-correction biases (41 x 512) are Megatron buffers, not
    counted. Active: the total without the MTP block and the 490 unrouted experts of each
    of the 40 E layers (40 x 490 x 2 x 1024 x 2688 = 107,898,470,400): 12,770,216,960."""
    counts = count_params(get_preset("nemotron-3-super"))
    assert counts.total == 123_611_012_096
    assert counts.mtp == 2_942_324_736
    assert counts.active == 123_611_012_096 - 2_942_324_736 - 107_898_470_400
    assert counts.active == 12_770_216_960
