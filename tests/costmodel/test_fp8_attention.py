"""FP8 attention (costmodel.fp8_attention, `ExecutionOptions.fp8_attention`): the attention
core on the recipe's FP8 curve, the tensors its core saves, and every refusal (asserted on
the rule id, not the wording)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.activation_shard import projection_saves_original_input
from costmodel.attention_core import attention_core_time_s
from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_attention import (
    FP8_ATTENTION_CURVE_RULE,
    FP8_ATTENTION_KERNEL_RULE,
    FP8_ATTENTION_RULE,
    MXFP8_SAVED_BYTES,
    attention_dtype,
    check_fp8_attention,
    core_saved_bytes,
)
from costmodel.layer_activations import layer_activations
from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import Fp8WeightStorage
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_plans
from profiles.lookup import attention_tflops
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

GB200 = load_profile("gb200-nvl72")
H100 = load_profile("h100-sxm-80gb")
A100 = load_profile("a100-sxm-80gb")
MI300X = load_profile("mi300x")
MODEL = get_preset("llama3-8b")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
PLAN = ParallelPlan.for_world(8, tp=2, pp=1, distributed_optimizer=True)


def _core_s(
    profile, direction: str, recipe: str | None, precision: str = "fp8", kernel: str = "flash"
) -> float:
    # one head of one sequence at 4096, head dim 128: 4·(s²/2)·d causal forward FLOPs
    return attention_core_time_s(
        profile,
        causal_forward_flops=4.0 * 4096 * 4096 / 2 * 128,
        batch_heads=1,
        seq_q=4096,
        seq_kv=4096,
        head_dim=128,
        precision=precision,
        kernel=kernel,  # type: ignore[arg-type]
        direction=direction,  # type: ignore[arg-type]
        fp8_attention_recipe=recipe,
    )


@pytest.mark.parametrize(
    ("recipe", "dtype"), [("mxfp8", "mxfp8"), ("tensorwise", "fp8"), ("delayed", "fp8")]
)
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_core_runs_at_the_recipes_curve(recipe: str, dtype: str, direction: str) -> None:
    bf16 = _core_s(GB200, direction, None)
    fp8 = _core_s(GB200, direction, recipe)
    rate = attention_tflops(GB200, direction, 4096, 128, "bf16") / attention_tflops(
        GB200, direction, 4096, 128, dtype
    )
    assert fp8 == pytest.approx(bf16 * rate, rel=1e-12)


def test_without_the_option_an_fp8_job_prices_bf16_attention() -> None:
    for direction in ("forward", "backward"):
        assert _core_s(GB200, direction, None) == _core_s(GB200, direction, None, "bf16")


def test_mxfp8_backward_is_slower_than_bf16_at_4096_as_measured() -> None:
    # [S58] GB200 Llama at 4096: mxfp8 forward 1685 vs bf16 1408, backward 1054 vs 1148
    assert _core_s(GB200, "forward", "mxfp8") < _core_s(GB200, "forward", None)
    assert _core_s(GB200, "backward", "mxfp8") > _core_s(GB200, "backward", None)


def test_the_megatron_estimate_prices_the_layers_attention_on_the_fp8_curve() -> None:
    model = get_preset("qwen3-30b-a3b")
    cluster = ClusterSpec(hardware="gb200-nvl72", num_gpus=8)
    plan = ParallelPlan.for_world(8, ep=8, micro_batch_size=4, distributed_optimizer=True)
    mxfp8 = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="mxfp8")
    off = estimate_plan(model, cluster, FP8, plan, GB200, options=mxfp8)
    on = estimate_plan(
        model, cluster, FP8, plan, GB200, options=dataclasses.replace(mxfp8, fp8_attention=True)
    )
    assert on.iteration_time_s != off.iteration_time_s
    # MXFP8 keeps row- and column-wise Q, K, V: a little more memory, never less
    assert on.peak_memory_bytes > off.peak_memory_bytes
    screened = screen_plans(
        model,
        cluster,
        FP8,
        GB200,
        plans_frame([plan]),
        options=dataclasses.replace(mxfp8, fp8_attention=True),
    )
    assert screened["iteration_time_s"].iloc[0] == pytest.approx(on.iteration_time_s, rel=0.05)
    assert screened["peak_memory_bytes"].iloc[0] == pytest.approx(on.peak_memory_bytes, rel=0.01)


@pytest.mark.parametrize("precision", ["bf16", "fp32", "nvfp4"])
def test_a_job_that_is_not_fp8_is_refused(precision: str) -> None:
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_RULE}\]"):
        attention_dtype(precision, "mxfp8")
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_RULE}\]"):
        _core_s(GB200, "forward", "mxfp8", precision)


def test_the_blockwise_recipe_is_refused() -> None:
    # Megatron-core does not pass fp8_dpa to Float8BlockScaling
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_RULE}\]"):
        attention_dtype("fp8", "blockwise")


@pytest.mark.parametrize(
    ("profile", "recipe"),
    [(A100, "delayed"), (MI300X, "tensorwise"), (H100, "mxfp8")],
    ids=["a100", "mi300x", "h100-mxfp8"],
)
def test_a_profile_without_the_curves_is_refused(profile, recipe: str) -> None:
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_CURVE_RULE}\]"):
        check_fp8_attention("fp8", recipe, profile)
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_CURVE_RULE}\]"):
        _core_s(profile, "forward", recipe)


def test_profiles_with_the_curves_and_runs_without_the_option_pass() -> None:
    check_fp8_attention("fp8", "delayed", H100)
    check_fp8_attention("fp8", "mxfp8", GB200)
    check_fp8_attention("bf16", None, A100)


@pytest.mark.parametrize(
    "fields",
    [
        {"attention": "materialized"},
        {"flash_attention_version": 2},
        {"runtime": "torch"},
    ],
    ids=["materialized", "fa2", "torch-runtime"],
)
def test_options_fp8_attention_cannot_run_with_are_refused(fields) -> None:
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_KERNEL_RULE}\]"):
        ExecutionOptions(fp8_attention=True, **fields)


def test_the_materialized_kernel_is_refused_in_the_core_too() -> None:
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_KERNEL_RULE}\]"):
        _core_s(GB200, "forward", "mxfp8", kernel="materialized")


def test_the_estimate_refuses_before_pricing() -> None:
    cluster = ClusterSpec(hardware="gb200-nvl72", num_gpus=8)
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_attention=True)
    bf16 = dataclasses.replace(FP8, precision="bf16")
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_RULE}\]"):
        estimate_plan(MODEL, cluster, bf16, PLAN, GB200, options=options)
    mi300x = ClusterSpec(hardware="mi300x", num_gpus=8)
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_CURVE_RULE}\]"):
        screen_plans(MODEL, mi300x, FP8, MI300X, plans_frame([PLAN]), options=options)


# ---- memory ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recipe", "qkv", "output"),
    [("delayed", 1.0, 1.0), ("tensorwise", 1.0, 2.0), ("mxfp8", MXFP8_SAVED_BYTES, 2.0)],
)
def test_core_saved_bytes_per_recipe(recipe: str, qkv: float, output: float) -> None:
    # MXFP8: row- and column-wise E4M3 with an E8M0 scale per 32, more than bf16's 2
    assert MXFP8_SAVED_BYTES == 2 * (1 + 1 / 32)
    assert core_saved_bytes("fp8", recipe, 2) == (qkv, output)
    assert core_saved_bytes("fp8", None, 2) == (2.0, 2.0)
    assert core_saved_bytes("fp32", None, 4) == (4.0, 4.0)


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise", "mxfp8"])
def test_layer_keeps_q_k_v_and_the_output_in_the_recipes_form(recipe: str) -> None:
    saves = projection_saves_original_input(recipe)
    off = dict(layer_activations(MODEL, FP8, PLAN, 0, proj_saves_input=saves).tensors)
    on = dict(
        layer_activations(
            MODEL, FP8, PLAN, 0, proj_saves_input=saves, fp8_attention_recipe=recipe
        ).tensors
    )
    qkv, output = core_saved_bytes("fp8", recipe, 2)
    assert on["qkv_heads"] == pytest.approx(off["qkv_heads"] * qkv / 2)
    tokens = PLAN.micro_batch_size * FP8.seq_length
    width = MODEL.num_attention_heads * MODEL.head_dim / PLAN.tp
    # delayed: the core's 1-byte output plus the projection's own FP8 copy; tensorwise and
    # mxfp8: the bf16 output, which the projection saves as its input; 2 bytes either way
    assert output + (0 if saves else 1) == 2
    assert on["attn_output"] == pytest.approx(2 * tokens * width)
    rest = {k: v for k, v in on.items() if k not in ("qkv_heads", "attn_output")}
    assert rest == {k: v for k, v in off.items() if k not in ("qkv_heads", "attn_output")}


def test_stage_memory_carries_the_layers_difference() -> None:
    storage = Fp8WeightStorage(recipe="delayed")
    (off,) = memory_per_stage(MODEL, FP8, PLAN, fp8_weights=storage)
    (on,) = memory_per_stage(MODEL, FP8, PLAN, fp8_weights=storage, fp8_attention=True)
    layer_off = layer_activations(MODEL, FP8, PLAN, 0).full_bytes
    layer_on = layer_activations(MODEL, FP8, PLAN, 0, fp8_attention_recipe="delayed").full_bytes
    # pp 1: one microbatch in flight, every layer stored
    saved = MODEL.num_layers * (layer_off - layer_on)
    assert off.activations_bytes - on.activations_bytes == pytest.approx(saved)
    with pytest.raises(SpecError, match=rf"\[{FP8_ATTENTION_RULE}\]"):
        memory_per_stage(
            MODEL, dataclasses.replace(FP8, precision="bf16"), PLAN, fp8_attention=True
        )
