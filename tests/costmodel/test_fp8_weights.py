"""FP8 weight storage (costmodel.memory_allowances.Fp8WeightStorage) in memory and the parameter
all-gather.

Byte counts per linear-layer weight element, worked from Transformer Engine's tensor
classes (``Float8Tensor``: 1-byte data, plus a 1-byte transpose where FP8 GEMMs are TN only;
``MXFP8Tensor``: row-wise and column-wise bytes with one scale byte per 32 elements each)
and Megatron-core's buffers (``param_and_grad_buffer.py``).
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from costmodel.memory import memory_per_stage
from costmodel.memory_allowances import Fp8WeightStorage
from costmodel.plan_frame import plans_frame
from costmodel.rank_params import non_unit_params, stage_params
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.params import count_params
from specs.plan import ParallelPlan
from specs.presets import get_preset

MODEL = get_preset("llama3-8b")
FP8 = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
BF16 = dataclasses.replace(FP8, precision="bf16")


@pytest.mark.parametrize(
    ("storage", "param_bytes", "cache_bytes", "gather_bytes"),
    [
        # bf16 parameter + cached FP8 data and transpose (Hopper)
        (Fp8WeightStorage(), 2.0, 2.0, 2.0),
        # Blackwell: no transpose
        (Fp8WeightStorage(tn_gemm_only=False), 2.0, 1.0, 2.0),
        # FP8 parameters, per-tensor scaling: uint8 parameter buffer, FP8 all-gather
        (Fp8WeightStorage(recipe="tensorwise", fp8_param=True, tn_gemm_only=False), 1.0, 0, 1),
        (Fp8WeightStorage(recipe="delayed", fp8_param=True), 2.0, 0.0, 1.0),
        # MXFP8 parameters: 2 + 2/32 bytes kept, gathered in bf16 through the grad buffer
        (Fp8WeightStorage(recipe="mxfp8", fp8_param=True), 2.0625, 0.0, 2.0),
        (Fp8WeightStorage(recipe="mxfp8"), 2.0, 2.0625, 2.0),
    ],
)
def test_bytes_per_linear_weight_element(storage, param_bytes, cache_bytes, gather_bytes):
    assert storage.param_bytes(FP8) == param_bytes
    assert storage.cache_bytes(FP8) == cache_bytes
    assert storage.gather_bytes(FP8) == gather_bytes
    # bf16 runs keep bf16 weights whatever the FP8 fields say
    assert (storage.linear_bytes(BF16), storage.gather_bytes(BF16)) == (2.0, 2.0)


def test_linear_params_are_the_layers_projections():
    plan = ParallelPlan.for_world(8, tp=2, pp=1)
    params = stage_params(MODEL, plan, 0)
    counts = count_params(MODEL)
    per_layer = counts.layers[0]
    assert params.linear == pytest.approx(
        MODEL.num_layers * (per_layer.attention + per_layer.mlp) / 2
    )
    assert params.linear < params.total


def test_default_fp8_run_keeps_the_cached_copy_and_fp8_params_drop_the_bf16_weight():
    plan = ParallelPlan.for_world(8, tp=1, distributed_optimizer=True)
    linear = stage_params(MODEL, plan, 0).linear
    (bf16,) = memory_per_stage(MODEL, BF16, plan)
    (cached,) = memory_per_stage(MODEL, FP8, plan)
    assert cached.weights_bytes - bf16.weights_bytes == pytest.approx(2.0 * linear)
    storage = Fp8WeightStorage(recipe="tensorwise", fp8_param=True, tn_gemm_only=False)
    (fp8_params,) = memory_per_stage(MODEL, FP8, plan, fp8_weights=storage)
    assert bf16.weights_bytes - fp8_params.weights_bytes == pytest.approx(linear)


def test_megatron_fsdp_shards_and_gathers_fp8_parameters():
    plan = ParallelPlan.for_world(
        64,
        tp=1,
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
        distributed_optimizer=False,
    )
    storage = Fp8WeightStorage(recipe="tensorwise", fp8_param=True, tn_gemm_only=False)
    (bf16,) = memory_per_stage(MODEL, FP8, plan, fp8_weights=Fp8WeightStorage(fp8_param=False))
    (fp8,) = memory_per_stage(MODEL, FP8, plan, fp8_weights=storage)
    linear = stage_params(MODEL, plan, 0).linear
    # without FP8 parameters TE caches every gathered weight whole: 2 bytes per element
    assert bf16.weights_bytes > 2.0 * linear
    # with them the shard and the two gathered layers are about half the bf16 ones; the
    # embedding and output layer (outside the FSDP units, held whole in bf16) do not move
    whole = 2.0 * non_unit_params(MODEL, plan, 0) * (1 - 1 / 64)
    assert fp8.weights_bytes - whole < 0.6 * (bf16.weights_bytes - 2.0 * linear - whole)


def test_fp8_parameters_shorten_the_parameter_all_gather():
    model = MODEL
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)
    plan = ParallelPlan.for_world(
        64, tp=1, distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=False
    )
    profile = load_profile("h100-sxm-80gb")
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    base = estimate_plan(model, cluster, FP8, plan, profile, options=options)
    fp8 = estimate_plan(
        model, cluster, FP8, plan, profile, options=dataclasses.replace(options, fp8_param=True)
    )
    assert 0 < fp8.breakdown.dp_exposed_s < base.breakdown.dp_exposed_s
    # the closed-form screen gathers the same bytes: it moves by the simulator's change
    fp8_options = dataclasses.replace(options, fp8_param=True)
    screened = [
        screen_plans(model, cluster, FP8, profile, plans_frame([plan]), options=o)
        for o in (options, fp8_options)
    ]
    moved = screened[0]["iteration_time_s"][0] - screened[1]["iteration_time_s"][0]
    assert moved == pytest.approx(base.iteration_time_s - fp8.iteration_time_s, rel=0.1)


def test_unknown_recipe_is_refused():
    with pytest.raises(SpecError, match="fp8_recipe"):
        ExecutionOptions(fp8_recipe="nvfp4")


@pytest.mark.parametrize(
    "options",
    [
        DEFAULT_OPTIONS,
        dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise", fp8_param=True),
        dataclasses.replace(
            DEFAULT_OPTIONS, fp8_recipe="mxfp8", fp8_param=True, fp8_tn_gemm_only=False
        ),
    ],
)
def test_screen_counts_fp8_weights_as_the_simulator(options):
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=64)
    fsdp = {
        "use_megatron_fsdp": True,
        "data_parallel_sharding_strategy": "optim_grads_params",
        "distributed_optimizer": False,
    }
    plans = [
        ParallelPlan.for_world(64, tp=1, pp=1, distributed_optimizer=True),
        ParallelPlan.for_world(64, tp=2, pp=4, vpp=2, distributed_optimizer=True),
        ParallelPlan.for_world(64, tp=1, pp=1, overlap_grad_reduce=True, **fsdp),
        ParallelPlan.for_world(64, tp=2, pp=2, overlap_grad_reduce=True, **fsdp),
    ]
    profile = load_profile("h100-sxm-80gb")
    screened = screen_plans(MODEL, cluster, FP8, profile, plans_frame(plans), options=options)
    simulated = [estimate_plan(MODEL, cluster, FP8, p, profile, options=options) for p in plans]
    for got, want in zip(screened["peak_memory_bytes"], simulated, strict=True):
        assert got == pytest.approx(want.peak_memory_bytes, rel=0.01)
    for got, want in zip(screened["iteration_time_s"], simulated, strict=True):
        assert got == pytest.approx(want.iteration_time_s, rel=0.05)


def test_megatron_fsdp_shards_keep_row_wise_data_only_for_per_tensor_fp8():
    # Megatron-FSDP builds a transposed weight buffer only for MXFP8
    # (fp8_need_transpose_data); per-tensor shards are uint8 row-wise data
    assert Fp8WeightStorage(recipe="delayed", fp8_param=True).shard_bytes(FP8) == 1.0
    assert Fp8WeightStorage(recipe="mxfp8", fp8_param=True).shard_bytes(FP8) == 2.0625
    assert Fp8WeightStorage().shard_bytes(FP8) == 2.0


@pytest.mark.parametrize(
    ("hardware", "tn_only"),
    [("h100-sxm-80gb", True), ("b200", False), ("gb300-nvl72", False), ("a100-sxm-80gb", True)],
)
def test_the_device_decides_whether_fp8_weights_keep_a_transpose(hardware, tn_only):
    # TE is_non_tn_fp8_gemm_supported: compute capability 10.x (Blackwell, Blackwell
    # Ultra) runs FP8 GEMMs in any layout; Hopper takes only TN
    profile = load_profile(hardware)
    assert device_options(DEFAULT_OPTIONS, profile).fp8_tn_gemm_only is tn_only
    # an explicit value is kept on every device
    forced = dataclasses.replace(DEFAULT_OPTIONS, fp8_tn_gemm_only=not tn_only)
    assert device_options(forced, profile).fp8_tn_gemm_only is not tn_only


def test_estimate_and_screen_drop_the_transpose_on_blackwell():
    # per-tensor FP8 parameters: 1 byte per linear element on B200, 2 where only TN runs
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise", fp8_param=True)
    cluster = ClusterSpec(hardware="b200", num_gpus=8)
    plan = ParallelPlan.for_world(8, tp=1, pp=1, distributed_optimizer=True)
    profile = load_profile("b200")
    linear = stage_params(MODEL, plan, 0).linear
    weights = {}
    for tn_only in (None, True):
        o = dataclasses.replace(options, fp8_tn_gemm_only=tn_only)
        est = estimate_plan(MODEL, cluster, FP8, plan, profile, options=o)
        screened = screen_plans(MODEL, cluster, FP8, profile, plans_frame([plan]), options=o)
        assert screened["peak_memory_bytes"][0] == pytest.approx(est.peak_memory_bytes, rel=0.01)
        weights[tn_only] = est.memory[0].weights_bytes
    assert weights[True] - weights[None] == pytest.approx(linear, rel=1e-9)
