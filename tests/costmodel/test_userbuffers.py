"""Transformer Engine userbuffers TP overlap per the framework's configuration
(costmodel.runtimes.megatron.userbuffers)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s
from costmodel.compute import gemm_time_s, memory_bound_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.userbuffers import (
    TP_OVERLAP_COMM_SMS,
    ring_reduce_time_s,
    ring_send_tail_s,
    sm_count,
    tp_overlap_pair_s,
    userbuffers_collective_time_s,
    userbuffers_step_time_s,
)
from costmodel.topology import strided_group_placement
from profiles.lookup import collective_fit
from profiles.store import load_profile
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.presets import get_preset

GB300 = load_profile("gb300-nvl72")
H100 = load_profile("h100-sxm-80gb")
LLAMA405 = get_preset("llama3.1-405b")
JOB = TrainingJob(seq_length=8192, global_batch_size=64, precision="fp8")
PLAN = ParallelPlan(tp=4, sequence_parallel=True, tp_comm_overlap=True)
RING = dataclasses.replace(DEFAULT_OPTIONS, tp_overlap_rs_method="ring_exchange")
NO_MARGIN = dataclasses.replace(DEFAULT_OPTIONS, tp_overlap_bulk_sm_margin=False)
BRIDGE_FP8 = dataclasses.replace(RING, tp_overlap_bulk_sm_margin=False)
"""The userbuffers configuration of Megatron-Bridge's FP8 Llama recipes
(``userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192``)."""


def tp4():
    return strided_group_placement(4, 1, gpus_per_node=4, scale_up_domain=72, nics_per_node=4)


def mlp_pair(tp: int = 4):
    """(size S, FC1 shape, FC2 shape) of the 405B MLP at micro-batch 1, sequence 8192."""
    tokens, h, ffn = 8192, LLAMA405.hidden_size, LLAMA405.ffn_hidden_size // tp
    return tokens * h * 2, (tokens, 2 * ffn, h), (tokens, h, ffn)


def layer(options: ExecutionOptions, plan: ParallelPlan = PLAN, profile=GB300):
    return layer_cost(LLAMA405, JOB, plan, profile, kind=DENSE_LAYER, options=options)


def test_defaults_are_transformer_engine_initialize_ub_defaults():
    assert DEFAULT_OPTIONS.tp_overlap_rs_method == "pipeline"
    assert DEFAULT_OPTIONS.tp_overlap_bulk_sm_margin is True
    assert DEFAULT_OPTIONS.tp_overlap_pipeline_sm_margin is True
    with pytest.raises(SpecError, match="tp_overlap_rs_method"):
        ExecutionOptions(tp_overlap_rs_method="bulk")  # type: ignore[arg-type]


def ring_s(size: float, m: float, n: float, k: float) -> float:
    """A ring_exchange overlap of tp = 4 on GB300: tp·g - G + (tp - 1)·max(0, p - g)."""
    chunk = gemm_time_s(GB300, int(m) // 4, int(n), int(k), "fp8")
    send = userbuffers_step_time_s(GB300, size / 4, tp4())
    whole = gemm_time_s(GB300, int(m), int(n), int(k), "fp8")
    return 4 * chunk - whole + 3 * max(0.0, send - chunk)


def test_ring_exchange_reduce_scatter_is_chunked_gemms_sends_and_one_reduction():
    # CommOverlapP2PBase::split_overlap_rs: tp GEMM chunks of T/tp rows, tp - 1 sends of
    # S/tp under the next chunk, then reduce_bf16 over the tp partials.
    size, fc1, fc2 = mlp_pair()
    ring_fwd, _ = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2, options=RING)
    pipe_fwd, _ = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2)
    reduce_s = memory_bound_time_s(GB300, 5 * size / 4)
    assert ring_reduce_time_s(GB300, size, 4) == pytest.approx(reduce_s)
    assert ring_fwd == pytest.approx(ring_s(size, *fc1) + ring_s(size, *fc2) + reduce_s)
    # The pipeline method leaves its last reduce-scatter chunk exposed and slows its GEMM
    # chunks by the 16-SM margin; the ring method does neither.
    last_chunk = userbuffers_collective_time_s(GB300, "reduce_scatter", size / 4, tp4())
    assert pipe_fwd > ring_s(size, *fc1) + last_chunk
    assert ring_fwd < pipe_fwd


def test_bulk_without_sm_margin_slows_the_gemm_only_while_the_comm_runs():
    size, fc1, fc2 = mlp_pair()
    _, margin = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2)
    _, shared = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2, options=NO_MARGIN)
    m, n, k = fc1
    dgrad, wgrad = gemm_time_s(GB300, m, k, n, "fp8"), gemm_time_s(GB300, k, n, m, "fp8")
    ag = userbuffers_collective_time_s(GB300, "all_gather", size, tp4())
    rs = userbuffers_collective_time_s(GB300, "reduce_scatter", size, tp4())
    slow = sm_count(GB300) / (sm_count(GB300) - TP_OVERLAP_COMM_SMS)
    fc2_dgrad_ring = ring_s(size, fc2[0], fc2[2], fc2[1])
    with_margin = (slow - 1) * (dgrad + wgrad)
    with_margin += max(0.0, ag - slow * dgrad) + max(0.0, rs - slow * wgrad)
    without = max(0.0, ag - dgrad) + max(0.0, rs - wgrad)
    without += (slow - 1) * (min(ag, dgrad) + min(rs, wgrad))
    assert margin == pytest.approx(fc2_dgrad_ring + with_margin)
    assert shared == pytest.approx(fc2_dgrad_ring + without)
    assert shared < margin


def test_userbuffers_collectives_pay_one_nvlink_hop_not_an_nccl_call():
    # reducescatter2_userbuff_* / allgather2_userbuff_inplace (TE v1.8 userbuffers.cu): one
    # flag exchange with the peers, then the peers' chunks over NVLink at the bus bandwidth.
    size = 64e6
    nccl = collective_time_s(H100, "reduce_scatter", size, tp8_h100())
    kernel = userbuffers_collective_time_s(H100, "reduce_scatter", size, tp8_h100())
    fit = collective_fit(H100, "reduce_scatter", 8, "intra")
    # 3.4 us: NCCL's per-hop NVLink latency (src/graph/tuning.cc, hardware.md section 2f)
    assert kernel == pytest.approx(3.4e-6 + size * 7 / 8 / (fit.busbw_GBps * 1e9))
    assert nccl - kernel == pytest.approx(fit.latency_s - 3.4e-6)
    assert userbuffers_collective_time_s(H100, "all_gather", 0.0, tp8_h100()) == 0.0
    across = strided_group_placement(8, 1, gpus_per_node=4, scale_up_domain=4, nics_per_node=4)
    assert userbuffers_collective_time_s(H100, "all_gather", size, across) == pytest.approx(
        collective_time_s(H100, "all_gather", size, across)
    )


def tp8_h100():
    return strided_group_placement(8, 1, gpus_per_node=8, scale_up_domain=8, nics_per_node=8)


TE1_DEFAULTS = dataclasses.replace(
    DEFAULT_OPTIONS, tp_overlap_bulk_sm_margin=False, tp_overlap_pipeline_sm_margin=False
)
"""Transformer Engine 1.x ``initialize_ub`` defaults: every method with ``set_sm_margin`` 0
(``add_ub``, transformer_engine/pytorch/module/base.py v1.7 to v1.13)."""


def test_pipeline_without_sm_margin_keeps_every_sm_but_shares_them_under_the_comm():
    # CommOverlapBase (TE v1.8 comm_gemm_overlap.h): _math_sms = set_sm_margin ? SMs - 16 : SMs.
    size, fc1, fc2 = mlp_pair()
    margin, _ = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2)
    shared, _ = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2, options=TE1_DEFAULTS)
    m, n, k = fc2
    whole = gemm_time_s(GB300, m, n, k, "fp8")
    chunk = gemm_time_s(GB300, m // 4, n, k, "fp8")
    rs = userbuffers_collective_time_s(GB300, "reduce_scatter", size / 4, tp4())
    slow = sm_count(GB300) / (sm_count(GB300) - TP_OVERLAP_COMM_SMS)
    with_margin = 4 * slow * chunk - whole + rs + 3 * max(0.0, rs - slow * chunk)
    without = 4 * chunk - whole + rs + 3 * max(0.0, rs - chunk) + 3 * (slow - 1) * min(rs, chunk)
    assert margin == pytest.approx(ring_s(size, *fc1) + with_margin)
    assert shared == pytest.approx(ring_s(size, *fc1) + without)
    assert shared < margin


def test_te1_defaults_shorten_the_exposed_tp_time_of_a_bf16_layer_on_h100():
    # The Megatron-LM README 2024 GPT 7.1B layer (tp 2, h 4096, s 4096), r0.8.0 on TE 1.x.
    model = ModelSpec(
        name="gpt-7.1b",
        num_layers=30,
        hidden_size=4096,
        num_attention_heads=32,
        ffn_hidden_size=4 * 4096,
        vocab_size=131072,
        activation="gelu",
    )
    job = TrainingJob(seq_length=4096, global_batch_size=192, precision="bf16")
    plan = ParallelPlan(tp=2, sequence_parallel=True, tp_comm_overlap=True)
    new = layer_cost(model, job, plan, H100, kind=DENSE_LAYER, options=DEFAULT_OPTIONS)
    old = layer_cost(model, job, plan, H100, kind=DENSE_LAYER, options=TE1_DEFAULTS)
    assert old.forward.compute_s == pytest.approx(new.forward.compute_s)
    assert old.forward.tp_exposed_s < new.forward.tp_exposed_s
    assert old.backward.tp_exposed_s < new.backward.tp_exposed_s


def test_recipe_configuration_moves_only_the_overlapped_tp_time():
    base, bridge = layer(DEFAULT_OPTIONS), layer(BRIDGE_FP8)
    assert bridge.forward.compute_s == pytest.approx(base.forward.compute_s)
    assert bridge.backward.compute_s == pytest.approx(base.backward.compute_s)
    assert bridge.forward.tp_s == pytest.approx(base.forward.tp_s)
    assert bridge.forward.tp_exposed_s < base.forward.tp_exposed_s
    assert bridge.backward.tp_exposed_s < base.backward.tp_exposed_s


def test_userbuffers_options_do_not_touch_plans_without_tp_comm_overlap():
    plain = ParallelPlan(tp=4, sequence_parallel=True)
    base, bridge = layer(DEFAULT_OPTIONS, plain), layer(BRIDGE_FP8, plain)
    assert bridge.forward.tp_exposed_s == base.forward.tp_exposed_s
    assert bridge.backward.tp_exposed_s == base.backward.tp_exposed_s


def test_all_gathers_take_gather_bytes_and_reduce_scatters_size():
    # gather_bytes A (the FP8 copy of an fp8 job) sets the ring-exchange sends and the bulk
    # all-gather; the reduce-scatters keep S. None is S.
    size, fc1, fc2 = mlp_pair()
    assert tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2) == tp_overlap_pair_s(
        GB300, 4, "fp8", size, tp4(), fc1, fc2, gather_bytes=size
    )
    # A 256-wide GEMM chunk is shorter than either send: each send is exposed beyond it.
    tiny = (8192, 256, 256)
    fwd_s, bwd_s = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), tiny, tiny, options=RING)
    fwd_a, bwd_a = tp_overlap_pair_s(
        GB300, 4, "fp8", size, tp4(), tiny, tiny, options=RING, gather_bytes=size / 2
    )
    send = userbuffers_step_time_s(GB300, size / 4, tp4())
    half = userbuffers_step_time_s(GB300, size / 8, tp4())
    assert fwd_s - fwd_a == pytest.approx(3 * (send - half), rel=1e-6)
    assert bwd_s > bwd_a


def test_send_tail_outlasts_the_dgrad_ring_only_beyond_its_last_chunks():
    # TE _Linear.backward (MXFP8 under --tp-comm-overlap) queues the wgrad's column-wise
    # output gradient on the dgrad GEMM's send stream after its tp - 1 ring sends p; the GEMM
    # spans tp·g + (tp - 1)·max(0, p - g) for chunks g of T/tp rows.
    size, _, fc2 = mlp_pair()
    m, n, k = fc2
    dgrad = (m, k, n)
    g = gemm_time_s(GB300, m // 4, k, n, "fp8")
    p = userbuffers_step_time_s(GB300, size / 2 / 4, tp4())
    span = 4 * g + 3 * max(0.0, p - g)
    window = span - 3 * p
    assert window > 0
    tail = ring_send_tail_s(GB300, 4, "fp8", size / 2, tp4(), dgrad, window + 1e-4)
    assert tail == pytest.approx(1e-4, rel=1e-6)
    assert ring_send_tail_s(GB300, 4, "fp8", size / 2, tp4(), dgrad, 0.5 * window) == 0.0
    assert ring_send_tail_s(GB300, 1, "fp8", size / 2, tp4(), dgrad, 1.0) == 0.0


def test_a_first_gather_outside_userbuffers_replaces_the_forward_ring():
    # _LayerNormLinear.forward turns ub_overlap_ag_fprop off under return_layernorm_output
    # (a LoRA adapter): the forward pays the blocking NCCL all-gather whole, not the ring
    # exchange of the column-parallel GEMM; the backward is unchanged.
    size, fc1, fc2 = mlp_pair()
    ring_f, ring_b = tp_overlap_pair_s(GB300, 4, "fp8", size, tp4(), fc1, fc2, options=RING)
    nccl_f, nccl_b = tp_overlap_pair_s(
        GB300, 4, "fp8", size, tp4(), fc1, fc2, options=RING, first_gather_s=2e-4
    )
    assert nccl_f - ring_f == pytest.approx(2e-4 - ring_s(size, *fc1), rel=1e-9)
    assert nccl_b == ring_b
