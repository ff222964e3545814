"""Decoder layers an FP8 or NVFP4 job keeps in bf16 (costmodel.bf16_layers,
`ExecutionOptions.first_last_layers_bf16`): a kept layer is priced as the same layer of a bf16
job, only the stages holding one change, the screen agrees with the simulator, and the rules
refuse what Megatron-core refuses.

Which layers: Megatron-core ``is_first_last_bf16_layer`` (``megatron/core/fp8_utils.py``)
and ``get_fp4_context`` (``megatron/core/fp4_utils.py``) keep global layer ``i`` in bf16
when ``i < num_layers_at_start_in_bf16`` or ``i >= num_layers - num_layers_at_end_in_bf16``.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.bf16_layer_rules import (
    BF16_LAYERS_FIELD_RULE,
    BF16_LAYERS_RULE,
    BF16_LAYERS_STAGE_RULE,
    bf16_layer_violations,
)
from costmodel.bf16_layers import bf16_layers
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import DEFAULT_OPTIONS, device_options
from costmodel.passes import comm_groups
from costmodel.plan_frame import plans_frame
from costmodel.runtimes.megatron.param_gather import param_gather_bytes
from costmodel.runtimes.megatron.pricing import chunk_costs
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.scale_up import RankPacking
from costmodel.screen import screen_plans
from costmodel.topology import plan_placements
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

B200 = load_profile("b200")
MODEL = get_preset("llama3-8b")  # 32 decoder layers
CLUSTER = ClusterSpec(num_gpus=8, gpus_per_node=8, hardware="b200")
NVFP4 = TrainingJob(seq_length=4096, global_batch_size=64, precision="nvfp4")
BF16 = dataclasses.replace(NVFP4, precision="bf16")
FP8 = dataclasses.replace(NVFP4, precision="fp8")
OFF = device_options(DEFAULT_OPTIONS, B200)
TENSORWISE = dataclasses.replace(OFF, fp8_recipe="tensorwise")


def _kept(options, start: int, end: int):
    return dataclasses.replace(
        options,
        first_last_layers_bf16=True,
        num_layers_at_start_in_bf16=start,
        num_layers_at_end_in_bf16=end,
    )


def _chunks(job, plan, options, model=MODEL, profile=B200, cluster=CLUSTER):
    runtime = MegatronRuntime(options=options)
    placements = plan_placements(profile, plan, RankPacking.of(cluster))
    return chunk_costs(
        model, job, plan, runtime.priced_profile(profile), comm_groups(placements), options
    )


def test_the_kept_layers_are_megatrons_global_indices() -> None:
    assert bf16_layers(MODEL, NVFP4, _kept(OFF, 1, 2)) == {0, 30, 31}
    assert bf16_layers(MODEL, NVFP4, _kept(OFF, 0, 4)) == {28, 29, 30, 31}
    # without the switch the counts are not read (Megatron-core: 0 when it is False)
    counts_only = dataclasses.replace(OFF, num_layers_at_end_in_bf16=4)
    assert bf16_layers(MODEL, NVFP4, counts_only) == frozenset()


@pytest.mark.parametrize(
    ("job", "options"), [(NVFP4, OFF), (FP8, TENSORWISE)], ids=["nvfp4", "fp8"]
)
def test_a_stage_of_kept_layers_costs_what_a_bf16_jobs_stage_costs(job, options) -> None:
    # pp 4: stage 0 holds layers 0-7; with the first 8 kept in bf16 its forward, backward
    # and recompute (GEMMs on the sustained bf16 curve, no quantization kernels) are the
    # bf16 job's, to the last bit, and its memory (bf16 weights without quantized copies,
    # bf16 activations) too
    plan = ParallelPlan.for_world(8, tp=2, pp=4, distributed_optimizer=True)
    kept = _kept(options, 8, 0)
    low = _chunks(job, plan, kept)[0][0]
    ref = _chunks(BF16, plan, OFF)[0][0]
    assert (low.forward, low.backward, low.recompute) == (ref.forward, ref.backward, ref.recompute)
    assert low.forward.duration_s != _chunks(job, plan, options)[0][0].forward.duration_s
    stage = MegatronRuntime(options=kept).memory(MODEL, job, plan)[0]
    bf16_stage = MegatronRuntime(options=OFF).memory(MODEL, BF16, plan)[0]
    assert stage.activations_bytes == bf16_stage.activations_bytes
    assert stage.weights_bytes == bf16_stage.weights_bytes


def test_only_the_stages_and_chunks_holding_kept_layers_change() -> None:
    # pp 2, vpp 2, 8 layers per chunk: stage 0 runs layers 0-7 and 16-23, stage 1 runs 8-15
    # and 24-31 (Megatron's interleaved chunk order); the last 4 sit in stage 1's chunk 1
    plan = ParallelPlan.for_world(
        8, tp=2, pp=2, vpp=2, schedule="interleaved", distributed_optimizer=True
    )
    base = _chunks(NVFP4, plan, OFF)
    kept = _chunks(NVFP4, plan, _kept(OFF, 0, 4))
    assert kept[0] == base[0] and kept[1][0] == base[1][0]
    assert kept[1][1].forward.duration_s > base[1][1].forward.duration_s


def test_an_uneven_split_moves_the_kept_layers_with_it() -> None:
    # decoder_last_pipeline_num_layers 2: the last stage holds layers 30-31 only, so the last
    # 4 kept layers span stages 2 (28-29) and 3 (30-31); stage 0 and 1 are untouched
    plan = ParallelPlan.for_world(
        8, tp=2, pp=4, decoder_last_pipeline_num_layers=2, distributed_optimizer=True
    )
    base = _chunks(NVFP4, plan, OFF)
    kept = _chunks(NVFP4, plan, _kept(OFF, 0, 4))
    assert kept[:2] == base[:2]
    assert all(
        k[0].forward.duration_s > b[0].forward.duration_s
        for k, b in zip(kept[2:], base[2:], strict=True)
    )
    before = MegatronRuntime(options=OFF).memory(MODEL, NVFP4, plan)
    after = MegatronRuntime(options=_kept(OFF, 0, 4)).memory(MODEL, NVFP4, plan)
    assert after[:2] == before[:2]
    assert all(a.total_bytes > b.total_bytes for a, b in zip(after[2:], before[2:], strict=True))


@pytest.mark.parametrize(
    ("name", "job", "options", "plans"),
    [
        (
            "llama3-8b",
            NVFP4,
            _kept(OFF, 1, 4),
            [
                {"tp": 1, "pp": 2},
                {"tp": 2, "pp": 4, "vpp": 2, "schedule": "interleaved"},
                {"tp": 2, "pp": 1, "recompute": "full"},
            ],
        ),
        ("llama3-8b", FP8, _kept(TENSORWISE, 2, 2), [{"tp": 2, "pp": 2}]),
        ("gpt-oss-20b", NVFP4, _kept(OFF, 0, 4), [{"tp": 1, "pp": 2, "ep": 4}]),
        ("nemotron-3-nano", FP8, _kept(TENSORWISE, 2, 2), [{"tp": 1, "pp": 2, "ep": 4}]),
    ],
    ids=["llama-nvfp4", "llama-fp8", "gpt-oss-nvfp4", "nano-fp8"],
)
def test_the_screen_agrees_with_the_simulator(name, job, options, plans) -> None:
    model = get_preset(name)
    for knobs in plans:
        plan = ParallelPlan.for_world(8, distributed_optimizer=True, **knobs)
        simulated = estimate_plan(model, CLUSTER, job, plan, B200, options=options)
        screened = screen_plans(model, CLUSTER, job, B200, plans_frame([plan]), options=options)
        assert screened["iteration_time_s"].iloc[0] == pytest.approx(
            simulated.iteration_time_s, rel=0.05
        )
        assert screened["peak_memory_bytes"].iloc[0] == pytest.approx(
            simulated.peak_memory_bytes, rel=0.01
        )


def test_the_parameter_gather_moves_kept_weights_in_bf16() -> None:
    # NVFP4 parameters gather their packed bytes (Fp8WeightStorage.gather_bytes); with every
    # layer kept, the stage's dense parameters are all bf16 weights: 2 bytes each
    plan = ParallelPlan.for_world(8, tp=1, pp=1, distributed_optimizer=True)
    ((base, _),) = param_gather_bytes(MODEL, NVFP4, plan, 0, OFF)
    ((kept, _),) = param_gather_bytes(MODEL, NVFP4, plan, 0, _kept(OFF, 0, 32))
    assert base < 1.0 and kept == 2.0


@pytest.mark.parametrize(
    ("job", "options", "match"),
    [
        (BF16, _kept(OFF, 1, 1), "the job is bf16"),
        (FP8, _kept(OFF, 1, 1), "delayed FP8 recipe"),
        (NVFP4, _kept(OFF, 20, 13), r"\(20\) \+ num_layers_at_end_in_bf16 \(13\) = 33 exceeds"),
    ],
    ids=["bf16-job", "delayed", "too-many"],
)
def test_what_megatron_or_the_model_cannot_take_is_refused(job, options, match) -> None:
    plan = ParallelPlan.for_world(8, tp=2, pp=1)
    with pytest.raises(SpecError, match=rf"\[{BF16_LAYERS_RULE}\].*{match}"):
        estimate_plan(MODEL, CLUSTER, job, plan, B200, options=options)
    with pytest.raises(SpecError, match=rf"\[{BF16_LAYERS_RULE}\]"):
        screen_plans(MODEL, CLUSTER, job, B200, plans_frame([plan]), options=options)


def test_an_fp8_job_keeps_at_most_the_layers_of_one_stage() -> None:
    # TransformerConfig.__post_init__ under fp8: each count <= num_layers // pp (32 // 4 = 8)
    options = _kept(TENSORWISE, 9, 0)
    deep = ParallelPlan.for_world(8, tp=2, pp=4, distributed_optimizer=True)
    (violation,) = bf16_layer_violations(MODEL, FP8, deep, options)
    assert violation.rule == BF16_LAYERS_STAGE_RULE and "32 // 4 = 8" in violation.message
    screened = screen_plans(MODEL, CLUSTER, FP8, B200, plans_frame([deep]), options=options)
    assert not screened["fits"].iloc[0] and screened["iteration_time_s"].iloc[0] == float("inf")
    shallow = ParallelPlan.for_world(8, tp=2, pp=2, distributed_optimizer=True)
    assert bf16_layer_violations(MODEL, FP8, shallow, options) == []
    # Megatron-core checks fp8 only
    assert bf16_layer_violations(MODEL, NVFP4, deep, _kept(OFF, 9, 0)) == []


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"num_layers_at_end_in_bf16": -1}, "num_layers_at_end_in_bf16 counts"),
        ({"first_last_layers_bf16": True, "runtime": "torch"}, "the torch runtime"),
    ],
)
def test_the_field_rules(changes, match) -> None:
    with pytest.raises(SpecError, match=rf"\[{BF16_LAYERS_FIELD_RULE}\].*{match}"):
        dataclasses.replace(DEFAULT_OPTIONS, **changes)
