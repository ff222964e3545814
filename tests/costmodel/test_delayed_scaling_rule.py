"""The memory savers Transformer Engine refuses under FP8 delayed scaling
(`costmodel.saved_inputs.delayed_scaling_problem`): Megatron-core calls
``set_save_original_input`` (`megatron/core/extensions/transformer_engine.py`) for them,
and TE's ``_Linear.forward`` / ``_GroupedLinear.forward`` raise "DelayedScaling recipe is
not supported with save_original_input" (TE d0067d0d, `pytorch/module/linear.py` line 326,
`module/grouped_linear.py` line 679)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.saved_inputs import delayed_scaling_problem, save_input_calls
from specs.plan import ParallelPlan
from specs.presets import get_preset

DSV3 = get_preset("deepseek-v3")
MIXTRAL = get_preset("mixtral-8x7b")
SHARED_MIXTRAL = dataclasses.replace(MIXTRAL, moe_shared_expert_size=4096)
LLAMA = get_preset("llama3-8b")


def _plan(*modules: str, offload: tuple[str, ...] = ()) -> ParallelPlan:
    recompute = "selective" if modules else "none"
    return ParallelPlan(
        recompute=recompute, recompute_modules=modules or None, offload_modules=offload
    )


def _problem(model, plan, recipe="delayed", precision="fp8", fused=False):
    return delayed_scaling_problem(
        model, plan, precision=precision, fp8_recipe=recipe, fused_grouped_mlp=fused
    )


def test_delayed_scaling_refuses_moe_act_and_layernorm_with_operands_and_fix():
    message = _problem(DSV3, _plan("layernorm", "moe_act"))
    assert message is not None
    for operand in ("fp8_recipe (delayed)", "moe_act", "layernorm", "MLA down projections"):
        assert operand in message
    assert "tensorwise or mxfp8" in message


@pytest.mark.parametrize(
    ("model", "plan", "calls"),
    [
        # TEGroupedMLP.__init__ (moe/experts.py): linear_fc2 under moe_act with fp8
        (MIXTRAL, _plan("moe_act"), ["recompute_modules moe_act (experts' linear_fc2)"]),
        # MoELayer.set_for_recompute_pre_mlp_layernorm (moe/moe_layer.py): nothing without a
        # shared expert; the dense and attention norms are fused (IdentityOp): no call
        (MIXTRAL, _plan("layernorm"), []),
        (LLAMA, _plan("layernorm"), []),
        (
            SHARED_MIXTRAL,
            _plan("layernorm"),
            ["recompute_modules layernorm (shared expert's linear_fc1)"],
        ),
        # the shared expert's checkpoint keeps the 16-bit input: no call
        (SHARED_MIXTRAL, _plan("layernorm", "shared_experts"), []),
        # MLASelfAttention.set_for_recompute_input_layernorm (multi_latent_attention.py)
        (
            DSV3,
            _plan("layernorm", "shared_experts"),
            ["recompute_modules layernorm (MLA down projections)"],
        ),
        # TEGroupedMLP.__init__: linear_fc1 under expert_fc1 offloading but MXFP8 / NVFP4
        (
            MIXTRAL,
            _plan(offload=("expert_fc1",)),
            ["offload_modules expert_fc1 (experts' linear_fc1)"],
        ),
        (DSV3, _plan("moe", "mla_up_proj", "core_attn"), []),
    ],
)
def test_calls_each_saver_reaches(model, plan, calls):
    assert save_input_calls(model, plan, fused_grouped_mlp=False) == calls


def test_only_fp8_delayed_scaling_on_the_unfused_experts_is_refused():
    plan = _plan("layernorm", "moe_act")
    assert _problem(DSV3, plan, recipe="tensorwise") is None
    assert _problem(DSV3, plan, recipe="mxfp8") is None
    assert _problem(DSV3, plan, precision="bf16") is None
    # the fused grouped MLP builds its own te.ops.GroupedLinear apart from linear_fc2
    assert _problem(MIXTRAL, _plan("moe_act"), fused=True) is None
    assert _problem(MIXTRAL, _plan("moe_act"), fused=False) is not None
