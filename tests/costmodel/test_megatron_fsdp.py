"""Megatron-FSDP memory and communication (`costmodel.runtimes.megatron.megatron_fsdp` and
its call sites)."""

from __future__ import annotations

import pytest

from costmodel.collectives import collective_time_s
from costmodel.iteration import simulate_iteration
from costmodel.memory import memory_per_stage
from costmodel.rank_params import non_unit_params
from costmodel.runtimes.megatron.megatron_fsdp import (
    GATHERED_LAYERS,
    ChunkGather,
    fsdp_param_gather_exposed_s,
    fsdp_state_bytes,
    grads_reduced_every_backward,
    largest_layer_params,
)
from costmodel.runtimes.megatron.runtime import MegatronRuntime
from costmodel.topology import plan_placements
from profiles import load_profile
from specs.job import TrainingJob
from specs.params import count_params
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
MODEL = get_preset("llama3-8b")
JOB = TrainingJob(seq_length=4096, global_batch_size=256)


def _fsdp(dp: int, strategy: str = "optim_grads_params") -> ParallelPlan:
    return ParallelPlan(dp=dp, use_megatron_fsdp=True, data_parallel_sharding_strategy=strategy)


def _state_bytes(plan: ParallelPlan) -> float:
    stage = memory_per_stage(MODEL, JOB, plan)[0]
    return stage.weights_bytes + stage.gradients_bytes + stage.optimizer_bytes


def test_state_memory_falls_with_dp_under_optim_grads_params() -> None:
    sizes = [_state_bytes(_fsdp(dp)) for dp in (2, 4, 8, 16, 64)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-1] < sizes[0] / 8


def test_zero3_formula_plus_the_gathered_layers() -> None:
    # ZeRO stage 3 (Rajbhandari et al. 2020, §5.1): (2 + 2 + K)·Ψ / N_d with K = 12 for
    # mixed-precision Adam; paraplan keeps fp32 main gradients (4 bytes), so (2 + 4 + 12),
    # plus two layers' gathered weights and gradients, plus the modules outside the FSDP
    # units (embedding, final norm, output layer) gathered whole in bf16 for the passes.
    psi = count_params(MODEL).total
    dp = 16
    working = GATHERED_LAYERS * largest_layer_params(MODEL, _fsdp(dp))
    outside = non_unit_params(MODEL, _fsdp(dp), 0)
    expected = (2 + 4 + 12) * psi / dp + (2 + 4) * working + 2 * outside * (1 - 1 / dp)
    assert _state_bytes(_fsdp(dp)) == pytest.approx(expected, rel=1e-9)


def test_modules_outside_the_units_are_the_embedding_norm_and_output_layer() -> None:
    # Megatron-FSDP's units are the transformer layers (mcore_fsdp_adapter.py); the rest of
    # a single-stage Llama 3 8B is its untied word embedding and output layer (vocabulary
    # padded to a multiple of 128) and the final RMSNorm
    plan = _fsdp(8)
    vocab = -(-MODEL.vocab_size // 128) * 128
    expected = 2 * vocab * MODEL.hidden_size + MODEL.hidden_size
    assert non_unit_params(MODEL, plan, 0) == pytest.approx(expected)


def test_an_mtp_depth_adds_its_projection_and_norms_outside_the_units() -> None:
    # MultiTokenPredictionLayer wraps a TransformerLayer (a unit) with its eh_proj and
    # enorm/hnorm/final norm, which are not
    model = get_preset("deepseek-v3")
    plan = ParallelPlan(tp=8, ep=8, dp=8, use_megatron_fsdp=True)
    depth = count_params(model).mtp_layers[0]
    without = model.replace(mtp_num_layers=0)
    extra = non_unit_params(model, plan, 0) - non_unit_params(without, plan, 0)
    assert extra == pytest.approx(depth.projection / plan.tp + depth.norms)


@pytest.mark.parametrize(
    ("strategy", "sharded"),
    [
        ("no_shard", ()),
        ("optim", ("optimizer",)),
        ("optim_grads", ("optimizer", "gradients")),
        ("optim_grads_params", ("optimizer", "gradients", "weights")),
    ],
)
def test_each_strategy_shards_its_zero_stage(strategy: str, sharded: tuple[str, ...]) -> None:
    psi = float(count_params(MODEL).total)
    state = fsdp_state_bytes(
        MODEL, _fsdp(8, strategy), dense_params=psi, expert_params=0.0, bytes_per_param=(2, 4, 12)
    )
    full = {"weights": 2 * psi, "gradients": 4 * psi, "optimizer": 12 * psi}
    for part, whole in full.items():
        value = getattr(state, f"{part}_bytes")
        if part in sharded:
            assert value < whole / 4
        else:
            assert value == whole


def test_optim_equals_the_distributed_optimizer_memory() -> None:
    fsdp = memory_per_stage(MODEL, JOB, _fsdp(8, "optim"))[0]
    distopt = memory_per_stage(MODEL, JOB, ParallelPlan(dp=8, distributed_optimizer=True))[0]
    assert fsdp.optimizer_bytes == pytest.approx(distopt.optimizer_bytes)
    assert fsdp.weights_bytes == distopt.weights_bytes


def test_gather_exposure_hand_worked() -> None:
    # One chunk, 4 passes over 8 layers, 0.8 s of gathers per pass, 10 s of compute: each
    # pass exposes its first layer (0.1 s) -> 0.4 s; the rest (2.8 s) hides behind compute.
    one = [ChunkGather(gather_s=0.8, num_layers=8, num_passes=4)]
    assert fsdp_param_gather_exposed_s(chunks=one, compute_s=10.0) == pytest.approx(0.4)
    # 1 s of compute: 2.8 - 1.0 = 1.8 s more is exposed.
    assert fsdp_param_gather_exposed_s(chunks=one, compute_s=1.0) == pytest.approx(2.2)
    none = [ChunkGather(gather_s=0.0, num_layers=8, num_passes=4)]
    assert fsdp_param_gather_exposed_s(chunks=none, compute_s=1.0) == 0.0


def test_gather_exposure_on_uneven_chunks_hand_worked() -> None:
    # Two chunks of an uneven split, 4 passes each: 0.7 s over 7 layers exposes 0.1 s per
    # pass, 0.9 s over 3 layers 0.3 s per pass -> 4 * 0.1 + 4 * 0.3 = 1.6 s; all gathers
    # (6.4 s) less those 1.6 s hide behind 10 s of compute.
    chunks = [
        ChunkGather(gather_s=0.7, num_layers=7, num_passes=4),
        ChunkGather(gather_s=0.9, num_layers=3, num_passes=4),
    ]
    assert fsdp_param_gather_exposed_s(chunks=chunks, compute_s=10.0) == pytest.approx(1.6)
    # An embedding-only chunk gathers one module.
    lone = [ChunkGather(gather_s=0.5, num_layers=0, num_passes=2)]
    assert fsdp_param_gather_exposed_s(chunks=lone, compute_s=10.0) == pytest.approx(1.0)


def test_pricing_gathers_each_stage_over_its_own_layer_count() -> None:
    """llama3-8b (32 layers) on pp4 with first/last stages of 7 layers (middle stages 9):
    each stage's exposed gather is that of its own layer count, not 32 / 4."""
    plan = ParallelPlan(
        pp=4, dp=2, micro_batch_size=1, use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
        decoder_first_pipeline_num_layers=7, decoder_last_pipeline_num_layers=7,
    )  # fmt: skip
    job = TrainingJob(seq_length=4096, global_batch_size=16)
    runtime = MegatronRuntime()
    sim = simulate_iteration(MODEL, job, plan, H100, runtime=runtime)
    priced = runtime.priced_profile(H100)
    group = plan_placements(priced, plan)["dp-cp"]
    for stage, layers in enumerate((7, 9, 9, 7)):
        (chunk,) = sim.chunks[stage]
        gather_s = collective_time_s(priced, "all_gather", chunk.dense_params * 2, group)
        passes = [t for t in sim.timing.actions[stage] if t.action.phase in ("F", "B")]
        reduce_s = sum(event[2] for event in sim.tails[stage].dp_events)
        expected = fsdp_param_gather_exposed_s(
            chunks=[ChunkGather(gather_s=gather_s, num_layers=layers, num_passes=len(passes))],
            compute_s=sum(t.end_s - t.start_s for t in passes) - reduce_s,
        )
        assert sim.tails[stage].param_gather_s == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("strategy", "every"),
    [("no_shard", False), ("optim", False), ("optim_grads", True), ("optim_grads_params", True)],
)
def test_sharded_gradients_are_reduced_in_every_backward(strategy: str, every: bool) -> None:
    """Megatron-FSDP's ``grad_reduce_every_bprop`` (optim_grads, optim_grads_params): each
    of the m backward passes reduce-scatters every layer's gradients, m times the bytes of
    one reduction; the other strategies and the distributed optimizer reduce once."""
    job = TrainingJob(seq_length=4096, global_batch_size=8)
    plan = ParallelPlan(
        dp=2, micro_batch_size=1, use_megatron_fsdp=True,
        data_parallel_sharding_strategy=strategy, overlap_grad_reduce=True,
    )  # fmt: skip
    assert grads_reduced_every_backward(plan) is every
    sim = simulate_iteration(MODEL, job, plan, H100, runtime=MegatronRuntime())
    (chunk,) = sim.chunks[0]
    events = sim.tails[0].dp_events
    microbatches = 4 if every else 1
    assert sum(e[3] for e in events) == pytest.approx(microbatches * chunk.dense_params * 4)
    if every:
        assert len(events) == microbatches * MODEL.num_layers
    distopt = ParallelPlan(dp=2, micro_batch_size=1, distributed_optimizer=True)
    assert not grads_reduced_every_backward(distopt)


def test_per_backward_reductions_and_gathers_share_the_links() -> None:
    """Llama-3-70B at tp 2 over 4 H100 servers (dp 16, four ranks of the group per server):
    each microbatch all-gathers the rank's weights twice and reduce-scatters its fp32
    gradients once over four NICs per server, more network time than its compute, so the
    iteration lasts at least the group's network time."""
    model = get_preset("llama3-70b")
    plan = ParallelPlan.for_world(
        32, tp=2, micro_batch_size=1, recompute="full", use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
        overlap_grad_reduce=True, overlap_param_gather=True,
    )  # fmt: skip
    job = TrainingJob(seq_length=2048, global_batch_size=128)
    runtime = MegatronRuntime()
    sim = simulate_iteration(model, job, plan, H100, runtime=runtime)
    group = plan_placements(runtime.priced_profile(H100), plan)["dp-cp"]
    (chunk,) = sim.chunks[0]
    passes = [t for t in sim.timing.actions[0] if t.action.phase in ("F", "B")]
    gathers_s = len(passes) * collective_time_s(
        runtime.priced_profile(H100), "all_gather", chunk.dense_params * 2, group
    )
    reduces_s = sum(e[2] for e in sim.tails[0].dp_events)
    compute_s = sum(t.end_s - t.start_s for t in passes)
    assert gathers_s + reduces_s > compute_s
    assert sim.iteration_time_s >= gathers_s + reduces_s
