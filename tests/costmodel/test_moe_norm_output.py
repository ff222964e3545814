"""What a MoE layer keeps of its pre-MLP norm output (`costmodel.layer_activations`
``router_input`` and ``shared_fc1_input``) and which recompute modules free it
(`costmodel.activation_savers.RECOMPUTE_TENSORS`): the router's 16-bit saved input, counted
once, and ``mlp``, which Megatron-core applies to dense layers only."""

from __future__ import annotations

import pytest

from costmodel.activation_savers import recomputed_bytes
from costmodel.layer_activations import kind_activations
from costmodel.runtimes.megatron.layer_costs import layer_cost
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, LayerKind
from specs.plan import ParallelPlan
from specs.presets import get_preset

MIXTRAL = get_preset("mixtral-8x7b")
DEEPSEEK = get_preset("deepseek-v3")
MOE_LAYER = LayerKind(mixer="attention", mlp="moe")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BF16 = TrainingJob(seq_length=4096, global_batch_size=64)
SP2 = ParallelPlan(tp=2, dp=4, sequence_parallel=True)
H100 = load_profile("h100-sxm-80gb")


def _saved(model, job, plan, kind=MOE_LAYER, saves=False) -> dict[str, float]:
    return dict(kind_activations(model, job, plan, kind, proj_saves_input=saves).tensors)


def _selective(*modules: str) -> ParallelPlan:
    return SP2.replace(recompute="selective", recompute_modules=modules)


def test_router_keeps_its_16_bit_input_without_a_shared_expert() -> None:
    # RouterGatingLinearFunction.forward (megatron/core/transformer/moe/moe_utils.py, HEAD
    # d98e8a64 and the core pins of Megatron-Bridge v0.2.0-v0.6.0):
    # ctx.save_for_backward(inp, weight, bias), the cast to moe_router_dtype inside.
    # Mixtral 8x7B, s = 4096, mbs 1, tp2 with SP: 2048 tokens x 4096 x 2 bytes = 16_777_216 B
    # under bf16 and fp8 alike (no shared expert: no quantized copy of it).
    for job in (BF16, FP8):
        saved = _saved(MIXTRAL, job, SP2)
        assert saved["router_input"] == 16_777_216
        assert "fc1_input" not in saved and "shared_fc1_input" not in saved


def test_router_input_is_counted_once_beside_the_shared_expert() -> None:
    # DeepSeek-V3, tp2 with SP: 2048 x 7168 norm output. bf16: the shared expert's
    # linear_fc1 saves the router's tensor (29_360_128 B, once). fp8 delayed: its FP8 copy
    # adds 2048 x 7168 x 1 = 14_680_064 B. Current scaling (set_save_original_input,
    # SharedExpertMLP.__init__): the router's tensor again, no copy.
    bf16 = _saved(DEEPSEEK, BF16, SP2)
    assert (bf16["router_input"], bf16["shared_fc1_input"]) == (29_360_128, 0)
    delayed = _saved(DEEPSEEK, FP8, SP2)
    assert (delayed["router_input"], delayed["shared_fc1_input"]) == (29_360_128, 14_680_064)
    current = _saved(DEEPSEEK, FP8, SP2, saves=True)
    assert (current["router_input"], current["shared_fc1_input"]) == (29_360_128, 0)


def test_mlp_recompute_frees_nothing_in_a_moe_layer() -> None:
    # TransformerLayer.__init__ (transformer_layer.py, HEAD and Bridge v0.2.0-v0.6.0 pins):
    # "if 'mlp' in recompute_modules: if not self.is_moe_layer: self.recompute_mlp = True".
    moe = tuple(_saved(DEEPSEEK, FP8, _selective("mlp")).items())
    assert recomputed_bytes(moe, ("mlp",)) == 0
    dense = dict(_saved(DEEPSEEK, FP8, _selective("mlp"), kind=DENSE_LAYER))
    # DeepSeek-V3's dense layers (ffn 18432): fc1 input 2048 x 7168 x 1 B, SwiGLU fc1 output
    # 4096 x 2 x 9216 x 2 B, activation output 4096 x 9216 x 1 B
    assert recomputed_bytes(tuple(dense.items()), ("mlp",)) == (
        14_680_064 + 150_994_944 + 37_748_736
    )


def test_mlp_recompute_adds_no_rerun_in_a_moe_layer() -> None:
    plain = layer_cost(DEEPSEEK, FP8, _selective("core_attn"), H100, kind=MOE_LAYER)
    with_mlp = layer_cost(DEEPSEEK, FP8, _selective("core_attn", "mlp"), H100, kind=MOE_LAYER)
    assert with_mlp.recompute == plain.recompute
    dense_plain = layer_cost(DEEPSEEK, FP8, _selective("core_attn"), H100, kind=DENSE_LAYER)
    dense_mlp = layer_cost(DEEPSEEK, FP8, _selective("core_attn", "mlp"), H100, kind=DENSE_LAYER)
    assert dense_mlp.recompute.duration_s > dense_plain.recompute.duration_s


@pytest.mark.parametrize(
    ("modules", "freed"),
    [
        # MoELayer.forward checkpoints custom_forward over hidden_states, the norm output:
        # the checkpoint keeps it, the shared expert's FP8 copy goes
        (("moe",), ("shared_fc1_input",)),
        (("shared_experts",), ("shared_fc1_input",)),
        # the pre-MLP norm's output-discarding checkpoint frees the storage every holder shares
        (("layernorm",), ("router_input",)),
        (("moe", "layernorm"), ("router_input", "shared_fc1_input")),
    ],
)
def test_norm_output_freed_by(modules, freed) -> None:
    saved = _saved(DEEPSEEK, FP8, SP2)
    names = ("router_input", "shared_fc1_input")
    got = recomputed_bytes(tuple((n, saved[n]) for n in names), modules)
    assert got == sum(saved[n] for n in freed)
