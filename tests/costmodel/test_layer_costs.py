"""Per-layer, per-microbatch costs with their TP/CP/EP communication
(costmodel.runtimes.megatron.layer_costs)."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.collectives import collective_time_s, ring_exchange_time_s
from costmodel.compute import gemm_time_s, memory_bound_time_s
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021
from costmodel.passes import CommGroups, PassCost
from costmodel.runtimes.megatron.attention_cp import cp_attention_steps
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.pair_quantization import fp8_pair_quantize_s
from costmodel.runtimes.megatron.userbuffers import (
    TP_OVERLAP_COMM_SMS,
    USERBUFFERS_STEP_LATENCY_S,
    sm_count,
    userbuffers_step_time_s,
)
from costmodel.topology import strided_group_placement
from profiles.lookup import memory_bandwidth_Bps
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.layer_kinds import DENSE_LAYER, MOE_LAYER
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")
LLAMA = get_preset("llama3-70b")
MOE = get_preset("mixtral-8x7b")
JOB = TrainingJob(seq_length=4096, global_batch_size=64)


def group(size: int, stride: int = 1):
    return strided_group_placement(
        size, stride, gpus_per_node=8, scale_up_domain=8, nics_per_node=8
    )


def cost(plan: ParallelPlan, model=LLAMA, **kwargs):
    return layer_cost(
        model, JOB, plan, H100, kind=MOE_LAYER if model.is_moe else DENSE_LAYER, **kwargs
    )


def activation_bytes(plan: ParallelPlan) -> float:
    """S = tokens x h x 2 bytes: the full activation one TP collective carries."""
    return plan.micro_batch_size * JOB.seq_length / plan.cp * LLAMA.hidden_size * 2


def test_tp_without_sp_is_two_all_reduces_each_way():
    # megatron-facts.md §6: forward 2 all-reduces of s·b·h without SP; same volume backward.
    plan = ParallelPlan(tp=8)
    c = cost(plan)
    ar = collective_time_s(H100, "all_reduce", activation_bytes(plan), group(8))
    assert c.forward.tp_s == pytest.approx(2 * ar)
    assert c.backward.tp_s == pytest.approx(2 * ar)
    assert c.forward.tp_exposed_s == c.forward.tp_s  # nothing overlaps without tp_comm_overlap


def test_tp_with_sp_is_two_gathers_and_two_scatters_each_way():
    plan = ParallelPlan(tp=8, sequence_parallel=True)
    size = activation_bytes(plan)
    expected = 2 * (
        collective_time_s(H100, "all_gather", size, group(8))
        + collective_time_s(H100, "reduce_scatter", size, group(8))
    )
    c = cost(plan)
    assert c.forward.tp_s == pytest.approx(expected)
    assert c.backward.tp_s == pytest.approx(expected)
    assert c.forward.tp_bytes == pytest.approx(4 * size)


def test_backward_input_gradient_reduction_runs_under_the_wgrad_gemm():
    # TE "Overlap dgrad-RS/AR with wgrad": the column-parallel input gradient's
    # reduce-scatter (SP) or all-reduce (no SP) is exposed only beyond the wgrad GEMM; the
    # row-parallel output gradient's all-gather is not overlapped.
    for sp in (True, False):
        plan = ParallelPlan(tp=8, sequence_parallel=sp)
        overlapped = cost(plan)
        synchronous = cost(plan, options=MEGATRON_2021)
        assert synchronous.backward.tp_exposed_s == pytest.approx(synchronous.backward.tp_s)
        assert overlapped.backward.tp_s == pytest.approx(synchronous.backward.tp_s)
        assert overlapped.forward.tp_exposed_s == pytest.approx(overlapped.forward.tp_s)
        assert 0 < overlapped.backward.tp_exposed_s < overlapped.backward.tp_s
    plan = ParallelPlan(tp=8, sequence_parallel=True)
    size = activation_bytes(plan)
    ag = collective_time_s(H100, "all_gather", size, group(8))
    rs = collective_time_s(H100, "reduce_scatter", size, group(8))
    # Weight-gradient GEMMs of QKV and FC1: (h x T) @ (T x width/tp).
    h, t = LLAMA.hidden_size, JOB.seq_length
    qkv = (LLAMA.num_attention_heads + 2 * LLAMA.query_groups) * LLAMA.head_dim // 8
    wgrads = [gemm_time_s(H100, h, w, t, "bf16") for w in (qkv, 2 * LLAMA.ffn_hidden_size // 8)]
    expected = 2 * ag + sum(max(0.0, rs - w) for w in wgrads)
    assert cost(plan).backward.tp_exposed_s == pytest.approx(expected)


def test_tp_comm_overlap_hides_communication_up_to_the_gemm_time():
    plain = cost(ParallelPlan(tp=8, sequence_parallel=True))
    overlapped = cost(ParallelPlan(tp=8, sequence_parallel=True, tp_comm_overlap=True))
    assert overlapped.forward.tp_s == pytest.approx(plain.forward.tp_s)
    assert 0 <= overlapped.forward.tp_exposed_s < plain.forward.tp_exposed_s
    assert overlapped.forward.compute_s == pytest.approx(plain.forward.compute_s)


def test_tp_comm_overlap_costs_its_sm_margin_where_there_is_little_to_hide():
    # Transformer Engine's bulk and pipeline overlaps run their GEMMs on SMs - 16
    # (initialize_ub defaults): at tp = 2 the 70B layer's GEMMs are long and its
    # collectives short, so the slower GEMMs outweigh what is hidden in backward.
    assert sm_count(H100) == 132 and sm_count(load_profile("a100-sxm-80gb")) == 108
    plain = cost(ParallelPlan(tp=2, sequence_parallel=True))
    overlapped = cost(ParallelPlan(tp=2, sequence_parallel=True, tp_comm_overlap=True))
    margin = (132 / (132 - TP_OVERLAP_COMM_SMS) - 1) * plain.backward.compute_s
    assert overlapped.backward.tp_exposed_s > plain.backward.tp_exposed_s
    assert overlapped.backward.tp_exposed_s < plain.backward.tp_exposed_s + margin


def test_userbuffers_ring_step_pays_one_nvlink_hop_not_an_nccl_call():
    # Transformer Engine's ring_exchange steps are copy-engine sends (initialize_ub use_ce
    # True): NCCL's NVLink hop latency (3.4 us, tuning.cc) plus the bytes at the profile's
    # intra-domain send_recv bus bandwidth (H100 profile: 376 GB/s, hardware.md §2g).
    chunk = activation_bytes(ParallelPlan(tp=8)) / 8
    step = userbuffers_step_time_s(H100, chunk, group(8))
    assert step == pytest.approx(USERBUFFERS_STEP_LATENCY_S + chunk / 376e9)
    assert step < ring_exchange_time_s(H100, chunk, 1, group(8))
    # A group across scale-up domains runs at the inter-domain send rate.
    across = group(8, stride=8)
    assert userbuffers_step_time_s(H100, chunk, across) == pytest.approx(
        ring_exchange_time_s(H100, chunk, 1, across)
    )
    assert userbuffers_step_time_s(H100, chunk, group(1)) == 0.0


def test_no_tp_no_tp_communication():
    c = cost(ParallelPlan())
    assert c.forward.tp_s == c.backward.tp_s == 0.0


def test_backward_is_about_twice_the_forward():
    # dgrad + wgrad = 2 x the forward GEMM FLOPs (costmodel.flops); the attention backward
    # does 2.5 x and element-wise ops a bit more, so the ratio sits a little above 2.
    c = cost(ParallelPlan(tp=8, sequence_parallel=True))
    assert 1.9 < c.backward.compute_s / c.forward.compute_s < 2.5
    assert c.backward.compute_s == pytest.approx(c.dgrad_s + c.wgrad_s)


def test_recompute_modes():
    none = cost(ParallelPlan(tp=8))
    selective = cost(ParallelPlan(tp=8, recompute="selective"))
    full = cost(ParallelPlan(tp=8, recompute="full"))
    assert none.recompute == PassCost()
    assert 0 < selective.recompute.compute_s < 0.2 * selective.forward.compute_s
    assert full.recompute == full.forward  # the whole forward, collectives included


def test_cp_ring_is_hidden_under_attention_and_all_gather_is_not():
    plan = ParallelPlan(tp=8, cp=2)
    groups = CommGroups(tp=group(8), cp=group(2, 8))  # the CP ring crosses nodes
    ring = cost(plan, groups=groups)
    kv = 2 * JOB.seq_length / 2 * 128 * 2  # K and V, one KV head per rank (g=8, tp=8)
    assert ring.forward.cp_s == pytest.approx(ring_exchange_time_s(H100, kv, 1, groups.cp))
    # the one send of cp = 2 runs under the first of the two attention steps only
    # (Transformer Engine AttnFuncWithCPAndKVP2P: one attention step per K/V chunk)
    assert ring.forward.cp_exposed_s == pytest.approx(
        max(0.0, ring.forward.cp_s - selective_core_s(plan, groups) / plan.cp)
    )
    gathered = cost(plan.replace(cp_comm_type="all_gather"), groups=groups)
    assert gathered.forward.cp_exposed_s == gathered.forward.cp_s > 0


def test_cp_ring_merges_each_step_partial_output_in_memory():
    # Transformer Engine AttnFuncWithCPAndKVP2P: per ring step, the partial output is merged
    # into the running output (3·T·q·e bytes); backward adds each step's dQ and dK/dV.
    # At 128k tokens every ring step's kernel (K/V of 16k or 32k) runs at the top of the
    # attention curve, as the all-gather variant's single kernel does: only merges differ.
    plan = ParallelPlan(tp=8, cp=4)
    groups = CommGroups(tp=group(8), cp=group(4, 8))
    job = TrainingJob(seq_length=131072, global_batch_size=8)
    ring = layer_cost(LLAMA, job, plan, H100, kind=DENSE_LAYER, groups=groups)
    gather_plan = plan.replace(cp_comm_type="all_gather")
    gathered = layer_cost(LLAMA, job, gather_plan, H100, kind=DENSE_LAYER, groups=groups)
    tokens = job.seq_length / plan.cp
    q = LLAMA.hidden_size / plan.tp
    kv = LLAMA.num_query_groups * LLAMA.hidden_size / LLAMA.num_attention_heads / plan.tp
    fwd = plan.cp * memory_bound_time_s(H100, 3 * tokens * q * 2)
    bwd = plan.cp * memory_bound_time_s(H100, 3 * tokens * (q + 2 * kv) * 2)
    assert ring.forward.compute_s - gathered.forward.compute_s == pytest.approx(fwd)
    assert ring.backward.compute_s - gathered.backward.compute_s == pytest.approx(bwd)


def selective_core_s(plan: ParallelPlan, groups: CommGroups) -> float:
    """The attention-core forward time (what selective recompute reruns, minus CP comm)."""
    return cost(plan.replace(recompute="selective"), groups=groups).recompute.compute_s


def test_fp8_layer_carries_the_quantization_of_both_linear_pairs():
    # The fp8 layer's element-wise work exceeds the bf16 layer's by exactly the two pairs'
    # quantization (GEMM times differ too, so compare on a profile whose fp8 GEMMs run at
    # the bf16 rate: peak and curve copied from bf16).
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=True)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    compute = dataclasses.replace(
        H100.compute,
        gemm_efficiency=H100.compute.gemm_efficiency
        | {"fp8": H100.compute.gemm_efficiency["bf16"]},
    )
    device = dataclasses.replace(
        H100.device, peak_tflops=H100.device.peak_tflops | {"fp8": H100.device.peak_tflops["bf16"]}
    )
    same_rate = dataclasses.replace(H100, compute=compute, device=device)
    bf16 = layer_cost(LLAMA, JOB, plan, same_rate, kind=DENSE_LAYER)
    fp8 = layer_cost(LLAMA, fp8_job, plan, same_rate, kind=DENSE_LAYER)
    h, tp = LLAMA.hidden_size, 8
    q = LLAMA.num_attention_heads * LLAMA.head_dim / tp
    kv = LLAMA.query_groups // tp * LLAMA.head_dim
    ffn = LLAMA.ffn_hidden_size / tp
    att = fp8_pair_quantize_s(same_rate, fp8_job, plan, h, q + 2 * kv, q, recipe="delayed")
    mlp = fp8_pair_quantize_s(same_rate, fp8_job, plan, h, 2 * ffn, ffn, recipe="delayed")
    extra_fwd = fp8.forward.compute_s - bf16.forward.compute_s
    extra_bwd = fp8.backward.compute_s - bf16.backward.compute_s
    assert extra_fwd == pytest.approx(att[0] + mlp[0], rel=1e-9)
    assert extra_bwd == pytest.approx(att[1] + mlp[1], rel=1e-9)


def test_current_scaling_layer_adds_the_amax_bytes_and_tp_reductions():
    # Over delayed scaling, per linear pair: forward the norm output's separate cast
    # (2e - 1 = 3 bytes per T/tp x h element) and the amax read of the row-parallel input
    # (e = 2 bytes per T x width element); backward the amax read of both output gradients
    # (2 bytes per element); and one 4-byte TP all-reduce of the amax each way (SP).
    # The output projection saves its 16-bit input under current scaling (Megatron-core
    # set_save_original_input; TE _Linear.forward casts it row-wise alone, 1 byte less per
    # T x q element, and _Linear.backward quantizes it again: amax read e plus e + 2 bytes,
    # 6 per element).
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=True)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    tensorwise = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    delayed = layer_cost(LLAMA, fp8_job, plan, H100, kind=DENSE_LAYER)
    current = layer_cost(LLAMA, fp8_job, plan, H100, kind=DENSE_LAYER, options=tensorwise)
    t, h, tp = 4096, LLAMA.hidden_size, 8
    q = LLAMA.num_attention_heads * LLAMA.head_dim / tp
    kv = LLAMA.query_groups // tp * LLAMA.head_dim
    ffn = LLAMA.ffn_hidden_size / tp
    fwd_bytes = 2 * 3 * t / tp * h + 2 * t * (q + ffn) - t * q
    bwd_bytes = 2 * t * (q + 2 * kv + 2 * ffn) + 2 * 2 * t / tp * h + 6 * t * q
    bw = memory_bandwidth_Bps(H100)
    assert current.forward.compute_s - delayed.forward.compute_s == pytest.approx(fwd_bytes / bw)
    assert current.backward.compute_s - delayed.backward.compute_s == pytest.approx(bwd_bytes / bw)
    amax = collective_time_s(H100, "all_reduce", 4, group(8))
    assert amax > 0
    assert current.forward.tp_s - delayed.forward.tp_s == pytest.approx(2 * amax)
    assert current.backward.tp_exposed_s - delayed.backward.tp_exposed_s == pytest.approx(2 * amax)


@pytest.mark.parametrize(
    ("recipe", "cudnn_norm", "net_bytes"),
    [
        ("delayed", True, 0),  # fused on either backend
        ("mxfp8", False, 3),  # TE's default: bf16 norm + MXFP8 cast, e + 2 = 4 over 3 - e = 1
        ("mxfp8", True, -1),  # cuDNN writes both MXFP8 copies: 2 - e = 0
    ],
)
def test_norm_backend_moves_only_the_norm_output_quantization(recipe, cudnn_norm, net_bytes):
    # Against delayed scaling on TE's norm, per linear pair (QKV, FC1): the forward
    # quantization of the T x h norm output changes by ``net_bytes`` per element;
    # nothing else in the layer moves (the MXFP8 scales come with the cast, no amax) but the
    # output projection's input, which MXFP8 saves in 16 bits (Megatron-core
    # set_save_original_input): TE casts it row-wise alone forward (1 byte less per T x q
    # element) and column-wise again backward (e + 1 = 3 bytes).
    # Without sequence parallelism: with it, the recipes also gather different copies
    # (test_linear_pairs).
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=False)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    options = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe=recipe, cudnn_norm=cudnn_norm)
    delayed = layer_cost(LLAMA, fp8_job, plan, H100, kind=DENSE_LAYER)
    other = layer_cost(LLAMA, fp8_job, plan, H100, kind=DENSE_LAYER, options=options)
    t, h = 4096, LLAMA.hidden_size
    q = LLAMA.num_attention_heads * LLAMA.head_dim / 8
    saved = recipe != "delayed"
    bw = memory_bandwidth_Bps(H100)
    extra = other.forward.compute_s - delayed.forward.compute_s
    assert extra == pytest.approx((2 * net_bytes * t * h - saved * t * q) / bw, abs=1e-12)
    extra_bwd = other.backward.compute_s - delayed.backward.compute_s
    assert extra_bwd == pytest.approx(saved * 3 * t * q / bw, abs=1e-12)
    assert other.backward.tp_s == delayed.backward.tp_s


def test_cudnn_norm_gives_current_scaling_the_full_amax_pass():
    # With NVTE_NORM_FWD_USE_CUDNN TE runs the current-scaling norm UNFUSED: the amax pass
    # reads the norm's bf16 output again (e = 2 bytes per T/tp x h element, both pairs).
    plan = ParallelPlan.for_world(8, tp=8, sequence_parallel=True)
    fp8_job = TrainingJob(seq_length=4096, global_batch_size=64, precision="fp8")
    te_norm = dataclasses.replace(DEFAULT_OPTIONS, fp8_recipe="tensorwise")
    cudnn = dataclasses.replace(te_norm, cudnn_norm=True)
    plain = layer_cost(LLAMA, fp8_job, plan, H100, kind=DENSE_LAYER, options=te_norm)
    fused = layer_cost(LLAMA, fp8_job, plan, H100, kind=DENSE_LAYER, options=cudnn)
    t, h, tp = 4096, LLAMA.hidden_size, 8
    extra = fused.forward.compute_s - plain.forward.compute_s
    assert extra == pytest.approx(2 * 2 * t / tp * h / memory_bandwidth_Bps(H100))
    assert fused.backward == plain.backward
    # bf16 layers have no quantization: the backend does not move them.
    bf16 = layer_cost(LLAMA, JOB, plan, H100, kind=DENSE_LAYER)
    bf16_cudnn = layer_cost(
        LLAMA,
        JOB,
        plan,
        H100,
        kind=DENSE_LAYER,
        options=dataclasses.replace(DEFAULT_OPTIONS, cudnn_norm=True),
    )
    assert bf16_cudnn == bf16


def test_cp_ring_steps_run_half_chunk_kernels():
    # TE's load-balanced ring: step 0 causal over s/cp, the other cp-1 steps split evenly
    # between K/V of s/(2·cp) and of s/cp; every step carries the same work.
    plan = ParallelPlan.for_world(8, cp=4)
    steps = cp_attention_steps(plan, 8192)
    assert steps == ((pytest.approx(0.25 + 0.375), 2048), (pytest.approx(0.375), 1024))
    assert sum(share for share, _ in steps) == pytest.approx(1.0)
    gather = ParallelPlan.for_world(8, cp=4, cp_comm_type="all_gather")
    assert cp_attention_steps(gather, 8192) == ((1.0, 2048),)
    assert cp_attention_steps(ParallelPlan.for_world(8), 8192) == ((1.0, 8192),)


def test_short_cp_chunks_slow_the_attention_core():
    # At 4k tokens and cp 2 the half-chunk kernels (1k K/V) run at a lower rate than the
    # 2k kernels, so the ring's attention is slower than the all-gather variant's single
    # kernel over the same work (communication apart: compare compute only).
    job = TrainingJob(seq_length=4096, global_batch_size=8)
    ring = layer_cost(LLAMA, job, ParallelPlan.for_world(8, cp=2), H100, kind=DENSE_LAYER)
    gather_plan = ParallelPlan.for_world(8, cp=2, cp_comm_type="all_gather")
    gather = layer_cost(LLAMA, job, gather_plan, H100, kind=DENSE_LAYER)
    selective = ParallelPlan.for_world(8, cp=2, recompute="selective")
    selective_gather = ParallelPlan.for_world(
        8, cp=2, recompute="selective", cp_comm_type="all_gather"
    )
    ring_core = layer_cost(LLAMA, job, selective, H100, kind=DENSE_LAYER).recompute.compute_s
    gather_core = layer_cost(
        LLAMA, job, selective_gather, H100, kind=DENSE_LAYER
    ).recompute.compute_s
    assert ring_core > gather_core
    assert ring.forward.compute_s > gather.forward.compute_s


def test_ep_dispatch_and_combine_each_way():
    plan = ParallelPlan(tp=1, dp=8, ep=8)
    c = cost(plan, model=MOE, groups=CommGroups(ep=group(8)))
    rows = MOE.moe_top_k * JOB.seq_length  # top-2 rows of every token on this rank
    a2a = collective_time_s(H100, "all_to_all", rows * MOE.hidden_size * 2, group(8))
    probs = collective_time_s(H100, "all_to_all", rows * 4, group(8))  # fp32, one per row
    counts = collective_time_s(H100, "all_gather", 8 * MOE.num_experts * 8, group(8))
    assert c.forward.ep_s == pytest.approx(2 * a2a + probs + counts)
    assert c.backward.ep_s == pytest.approx(2 * a2a + probs)
    assert c.forward.ep_exposed_s == c.forward.ep_s


def test_expert_work_per_rank_shrinks_with_ep_and_grows_with_capacity():
    one = cost(ParallelPlan(dp=8), model=MOE).forward.compute_s
    eight = cost(ParallelPlan(dp=8, ep=8), model=MOE, groups=CommGroups(ep=group(8)))
    assert eight.forward.compute_s < one
    padded = MOE.replace(moe_capacity_factor=2.0)
    assert cost(ParallelPlan(dp=8, ep=8), model=padded).forward.compute_s > (
        eight.forward.compute_s
    )


def test_pass_cost_arithmetic():
    a = PassCost(compute_s=1.0, tp_s=2.0, tp_exposed_s=1.0, ep_exposed_s=0.5)
    assert a.duration_s == 2.5
    assert a.plus(a).scaled(0.5) == a
