"""Memory per rank (costmodel.memory): model state against Megatron's goldens, pipeline
stages, gradient buffers and the framework allowance. Activations are tested in
`test_memory_activations.py`, monotonicity properties in `test_memory_properties.py`.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.activations import (
    checkpoint_groups,
    in_flight_chunk_counts,
    recomputed_layers,
    stage_activations,
)
from costmodel.layer_activations import layer_activations
from costmodel.megatron_estimator import megatron_theoretical_memory
from costmodel.memory import StageMemory, memory_per_stage, peak_memory_bytes
from costmodel.memory_allowances import NO_ALLOWANCE, FrameworkAllowance, GiB
from costmodel.mtp_activations import mtp_depth_tensors
from costmodel.rank_params import stage_params
from costmodel.schedules import chunk_layers, max_in_flight, schedule_actions
from specs import ParallelPlan, SpecError, TrainingJob
from specs.params import count_params, padded_vocab_size
from specs.presets import get_preset
from tests.costmodel.memory_fixture import mha_gpt, stage0

# ---- weights, gradients, optimizer vs Megatron's compute_weight_and_optimizer_memory -----------


@pytest.mark.parametrize(
    ("name", "plan"),
    [
        ("llama3-8b", ParallelPlan(tp=2, dp=4)),
        ("llama3-8b", ParallelPlan(tp=2, pp=4, dp=4)),
        ("llama3-8b", ParallelPlan(tp=4, pp=2, dp=8, distributed_optimizer=True)),
        ("llama3-70b", ParallelPlan(tp=8, pp=4, vpp=2, dp=16, distributed_optimizer=True)),
        ("mixtral-8x7b", ParallelPlan(tp=2, dp=8, ep=8, etp=1, distributed_optimizer=True)),
        ("mixtral-8x7b", ParallelPlan(tp=2, pp=2, dp=4, ep=4, etp=2)),
        ("deepseek-v3", ParallelPlan(tp=8, dp=32, ep=32, etp=1, distributed_optimizer=True)),
    ],
)
def test_stage0_weights_and_optimizer_match_megatron(name: str, plan: ParallelPlan) -> None:
    # Megatron's estimator: 18 bytes/param without the distributed optimizer, 6 + 12/dp with
    # it (experts 6 + 12/expert_dp); stage 0 holds L/p layers and the padded embedding. The
    # differences: Megatron puts final_norm/p on stage 0, ours keeps it on the last stage;
    # ours also holds the MTP layers on the last stage (here stage 0: pp is 1), compared
    # without them; and ours holds MLA's down projections q_a and kv_a whole on every tp
    # rank (MLASelfAttention builds them TELinear parallel_mode="duplicated"), which
    # theoretical_memory_usage.py divides over tp with the rest of self_attn_term.
    model = get_preset(name)
    job = TrainingJob(seq_length=4096, global_batch_size=256)
    ours = stage0(model.replace(mtp_num_layers=0), job, plan).model_state_bytes
    megatron, _ = megatron_theoretical_memory(model, job, plan)
    dense_bytes = 6 + 12 / plan.dp if plan.distributed_optimizer else 18
    final_norm = count_params(model).final_norm
    if plan.pp > 1:
        megatron -= final_norm / plan.pp * dense_bytes
    down = sum(layer.latent_down_projections for layer in count_params(model).layers)
    megatron += down / plan.pp * (1 - 1 / plan.tp) * dense_bytes
    assert ours == pytest.approx(megatron, rel=1e-12)


def test_tied_embedding_counted_once_without_pipeline() -> None:
    model = mha_gpt()
    job = TrainingJob(seq_length=1024, global_batch_size=8)
    plan = ParallelPlan(tp=2, dp=4)
    megatron, _ = megatron_theoretical_memory(model, job, plan)
    assert stage0(model, job, plan).model_state_bytes == pytest.approx(megatron, rel=1e-9)
    # with pp > 1 the last stage holds its own copy of the tied matrix
    plan = ParallelPlan(tp=2, pp=2, dp=4)
    stages = memory_per_stage(model, job, plan, allowance=NO_ALLOWANCE)
    matrix = padded_vocab_size(50257, 2) * 1024 / 2
    first, last = stage_params(model, plan, 0), stage_params(model, plan, 1)
    assert first.dense == pytest.approx(last.dense - count_params(model).final_norm)
    assert first.dense > matrix and stages[0].weights_bytes == 2 * first.total


def test_bytes_per_parameter_by_precision_and_sharding() -> None:
    model = get_preset("tiny")
    plan = ParallelPlan(dp=4, cp=2)
    params = stage_params(model, plan, 0).total
    bf16 = stage0(model, TrainingJob(seq_length=256, global_batch_size=8), plan)
    assert (bf16.weights_bytes, bf16.gradients_bytes, bf16.optimizer_bytes) == pytest.approx(
        (2 * params, 4 * params, 12 * params)
    )
    fp32 = stage0(model, TrainingJob(seq_length=256, global_batch_size=8, precision="fp32"), plan)
    assert (fp32.weights_bytes, fp32.optimizer_bytes) == pytest.approx((4 * params, 8 * params))
    # distributed optimizer: 6 + 12/(dp·cp) in bf16, 8 + 8/(dp·cp) in fp32
    sharded = plan.replace(distributed_optimizer=True)
    job = TrainingJob(seq_length=256, global_batch_size=8)
    assert stage0(model, job, sharded).model_state_bytes == pytest.approx((6 + 12 / 8) * params)
    job32 = TrainingJob(seq_length=256, global_batch_size=8, precision="fp32")
    assert stage0(model, job32, sharded).model_state_bytes == pytest.approx((8 + 8 / 8) * params)


def test_kv_heads_are_replicated_when_tp_exceeds_query_groups() -> None:
    # Megatron accepts tp % g == 0: with tp = 16 and g = 8 each rank keeps one K/V head, so
    # K/V weights and activations per rank stop shrinking at tp = g.
    model = get_preset("llama3-70b")
    h, d = 8192, 128
    layer = count_params(model).layers[0]
    key_value = 2 * 8 * d * h
    tp16 = stage_params(model, ParallelPlan(tp=16, pp=80), 1).dense
    assert tp16 == pytest.approx(
        (layer.attention - key_value) / 16 + key_value / 8 + layer.mlp / 16 + layer.norms
    )
    # activations without SP (bf16, flash): 10·n·h outside TP + Q/out-proj 2·n·2q/t + one
    # K and one V head 2·n·2d + fp32 LSE 4·n·a/t + SwiGLU 2·n·3F/t, n = 1024 tokens
    n, q, a, f = 1024, 8192, 64, 28672
    expected = 10 * n * h + 2 * n * (2 * q / 16 + 2 * d) + 4 * n * a / 16 + 2 * n * 3 * f / 16
    job = TrainingJob(seq_length=n, global_batch_size=1)
    full = layer_activations(model, job, ParallelPlan(tp=16), 0).full_bytes
    assert full == pytest.approx(expected)


def test_expert_parameters_shard_over_ep_etp_and_expert_dp() -> None:
    model = get_preset("tiny-moe")
    counts = count_params(model)
    routed = sum(layer.routed_experts for layer in counts.layers)
    plan = ParallelPlan(tp=2, dp=4, ep=4, etp=1, distributed_optimizer=True)
    assert stage_params(model, plan, 0).expert == routed / 4
    job = TrainingJob(seq_length=256, global_batch_size=8)
    memory = stage0(model, job, plan)
    dense = stage_params(model, plan, 0).dense
    assert plan.expert_dp == 2
    assert memory.optimizer_bytes == pytest.approx(12 * (dense / 4 + routed / 4 / 2))


# ---- pipeline stages -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pp", "vpp", "m"),
    [(1, 1, 3), (2, 1, 1), (4, 1, 2), (4, 1, 9), (4, 2, 4), (4, 2, 8), (2, 3, 6), (8, 2, 16)],
)
def test_in_flight_counts_match_generated_schedules(pp: int, vpp: int, m: int) -> None:
    for rank, actions in enumerate(schedule_actions(pp, vpp, m)):
        counts = in_flight_chunk_counts(pp, vpp, rank, m)
        assert sum(counts) == max_in_flight(actions)
        if vpp == 1:
            assert counts == (min(pp - rank, m),)
        else:
            warmup = 2 * (pp - rank - 1) + (vpp - 1) * pp
            assert sum(counts) == min(warmup + 1, m * vpp)


def test_every_stage_is_modelled() -> None:
    model = get_preset("llama3-8b")
    job = TrainingJob(seq_length=4096, global_batch_size=64)
    plan = ParallelPlan(tp=2, pp=4, dp=2, sequence_parallel=True, recompute="selective")
    stages = memory_per_stage(model, job, plan, allowance=NO_ALLOWANCE)
    assert [s.pp_rank for s in stages] == [0, 1, 2, 3]
    assert [s.num_layers for s in stages] == [8, 8, 8, 8]
    assert [s.in_flight_microbatches for s in stages] == [4, 3, 2, 1]
    assert stages[0].embedding_activations_bytes > 0 and stages[0].output_activations_bytes == 0
    assert stages[3].output_activations_bytes > 0 and stages[3].embedding_activations_bytes == 0
    assert stages[1].embedding_activations_bytes == stages[1].output_activations_bytes == 0
    # middle stages hold only layers; the ends add the embedding / output layer
    assert stages[1].weights_bytes == stages[2].weights_bytes < stages[0].weights_bytes
    assert peak_memory_bytes(model, job, plan, allowance=NO_ALLOWANCE) == max(
        s.total_bytes for s in stages
    )


def test_full_recompute_keeps_checkpoint_inputs_and_one_working_group() -> None:
    model = mha_gpt(num_layers=8)
    job = TrainingJob(seq_length=1024, global_batch_size=4)
    plan = ParallelPlan(tp=2, pp=2, dp=1, sequence_parallel=True, recompute="full")
    layer = layer_activations(model, job, plan, 0)
    memory = stage0(model, job, plan)
    assert memory.activations_bytes == pytest.approx(2 * 4 * layer.input_bytes)  # 2 in flight
    assert memory.recompute_working_bytes == pytest.approx(layer.full_bytes - layer.input_bytes)
    grouped = plan.replace(recompute_num_layers=2)
    assert checkpoint_groups(grouped, range(4)) == ((0, 1), (2, 3))
    assert stage0(model, job, grouped).activations_bytes == pytest.approx(2 * 2 * layer.input_bytes)
    block = plan.replace(recompute_method="block", recompute_num_layers=1)
    assert checkpoint_groups(block, range(4, 8)) == ((4,),)
    assert recomputed_layers(model, block) == frozenset({0, 4})
    assert stage0(model, job, block).activations_bytes == pytest.approx(
        2 * (layer.input_bytes + 3 * layer.full_bytes)
    )


def test_framework_allowance() -> None:
    model = get_preset("tiny")
    job = TrainingJob(seq_length=256, global_batch_size=4)
    plan = ParallelPlan()
    allowance = FrameworkAllowance(fixed_bytes=1 * GiB, fraction=0.2)
    bare = stage0(model, job, plan)
    with_allowance = memory_per_stage(model, job, plan, allowance=allowance)[0]
    dynamic = bare.activation_total_bytes + bare.comm_buffers_bytes
    assert with_allowance.framework_bytes == pytest.approx(GiB + 0.2 * dynamic)
    assert memory_per_stage(model, job, plan)[0].framework_bytes >= 1.5 * GiB
    with pytest.raises(SpecError, match="fraction"):
        FrameworkAllowance(fraction=1.5)


def test_bad_plans_raise_spec_error() -> None:
    model = get_preset("tiny")
    job = TrainingJob(seq_length=256, global_batch_size=4)
    with pytest.raises(SpecError, match="layers_divisible_by_pp: "):
        memory_per_stage(model, job, ParallelPlan(pp=3))
    with pytest.raises(SpecError, match="num_microbatches"):
        memory_per_stage(model, job, ParallelPlan(dp=8))
    with pytest.raises(SpecError, match="layer_index"):
        layer_activations(model, job, ParallelPlan(), 4)


def test_bf16_main_gradients_halve_the_gradient_buffer() -> None:
    # Megatron --grad-reduce-in-bf16 (megatron-facts.md §5.2): 2-byte main gradients.
    model = get_preset("llama3-8b")
    plan = ParallelPlan(tp=1, dp=8, micro_batch_size=1, distributed_optimizer=True)
    job = TrainingJob(seq_length=4096, global_batch_size=8)
    (fp32,) = memory_per_stage(model, job, plan)
    (bf16,) = memory_per_stage(model, job, plan, main_grad_bytes=2)
    assert bf16.gradients_bytes == pytest.approx(fp32.gradients_bytes / 2)
    assert bf16.weights_bytes == fp32.weights_bytes


def test_the_stage_holding_the_mtp_layer_holds_its_parameters() -> None:
    """DeepSeek-V3's MTP depth (`specs.params.MtpParams`) sits on the last stage: its layer
    split like the others (routed experts over ep·etp, MLA's down projections whole), its
    projection over tp, its norms replicated, and the stage's own copy of the word embedding
    it looks the shifted tokens up in (GPTModel builds ``self.embedding`` when ``mtp_process``,
    megatron/core/models/gpt/gpt_model.py): 129280 (a multiple of 128·2) x 7168 / tp 2 =
    463,339,520 parameters."""
    model = get_preset("deepseek-v3")
    plan = ParallelPlan(tp=2, pp=4, ep=8, etp=1, dp=16, decoder_last_pipeline_num_layers=13)
    without = model.replace(mtp_num_layers=0)
    depth = count_params(model).mtp_layers[0]
    layer = depth.layers[0]
    last, first = stage_params(model, plan, 3), stage_params(model, plan, 0)
    assert last.expert - stage_params(without, plan, 3).expert == layer.routed_experts / 8
    extra_dense = last.dense - stage_params(without, plan, 3).dense
    dense_layer = layer.attention / 2 + layer.mlp / 2 + layer.norms
    dense_layer += layer.latent_down_projections
    dense_layer += layer.router + depth.projection / 2 + depth.norms
    assert extra_dense == pytest.approx(dense_layer + 463_339_520, rel=1e-12)
    assert first == stage_params(without, plan, 0)


def test_kept_pipeline_outputs_add_one_activation_per_sending_microbatch() -> None:
    # Megatron-LM 2021 schedules keep each sent output [s, b, h] until its backward;
    # current Megatron frees it (deallocate_output_tensor). 1F1B with pp = 4: stage r holds
    # min(pp - r, m) microbatches; the last stage sends nothing.
    model = get_preset("gpt-1.7b")
    job = TrainingJob(seq_length=2048, global_batch_size=64)
    plan = ParallelPlan(tp=2, pp=4, micro_batch_size=2)
    freed = memory_per_stage(model, job, plan)
    kept = memory_per_stage(model, job, plan, keep_outputs=True)
    output_bytes = 2 * 2048 * model.hidden_size * 2  # b·s·h bf16, full on every tp rank
    for stage, (a, b) in enumerate(zip(freed, kept, strict=True)):
        sending = 0 if stage == plan.pp - 1 else min(plan.pp - stage, 32)
        assert b.activations_bytes - a.activations_bytes == pytest.approx(sending * output_bytes)


def test_pytorch_ddp_keeps_a_bucket_copy_of_the_gradients() -> None:
    # PyTorch DistributedDataParallel without gradient_as_bucket_view (its default, and
    # Megatron-LM 2021's `--DDP-impl torch`, megatron/training.py at the examples/sc21
    # commit) copies every gradient into its buckets: "the saved memory size will be equal
    # to the total gradients size" (PyTorch DDP documentation). SC21 Table 1, GPT 1.7B.
    model = get_preset("gpt-1.7b")
    job = TrainingJob(seq_length=2048, global_batch_size=512)
    torch_ddp = ParallelPlan.for_world(32, micro_batch_size=16, overlap_grad_reduce=True)
    local_ddp = dataclasses.replace(torch_ddp, overlap_grad_reduce=False)
    params = stage_params(model, torch_ddp, 0).total

    def stage(plan: ParallelPlan, copy: bool) -> StageMemory:
        return memory_per_stage(model, job, plan, main_grad_bytes=2, ddp_gradient_copy=copy)[0]

    copied = stage(torch_ddp, True)
    assert copied.gradients_bytes == pytest.approx(2 * 2 * params)
    assert stage(torch_ddp, False).gradients_bytes == pytest.approx(2 * params)
    assert stage(local_ddp, True).gradients_bytes == pytest.approx(2 * params)
    # a long-lived buffer: no fragmentation allowance on it
    assert copied.total_bytes - stage(torch_ddp, False).total_bytes == pytest.approx(2 * params)


def test_expandable_segments_take_their_own_fragmentation_share() -> None:
    model = get_preset("tiny")
    job = TrainingJob(seq_length=256, global_batch_size=4)
    plan = ParallelPlan()
    allowance = FrameworkAllowance(fixed_bytes=GiB, fraction=0.2, expandable_fraction=0.1)
    bare = stage0(model, job, plan)
    dynamic = bare.activation_total_bytes + bare.comm_buffers_bytes
    (expandable,) = memory_per_stage(
        model, job, plan, allowance=allowance, expandable_segments=True
    )
    assert expandable.framework_bytes == pytest.approx(GiB + 0.1 * dynamic)
    assert allowance.fragmentation(False) == 0.2
    with pytest.raises(SpecError, match="expandable_fraction"):
        FrameworkAllowance(expandable_fraction=-0.1)


def test_interleaved_peak_stage_holds_megatrons_warmup_and_estimator_count() -> None:
    """Llama 3.1 405B, tp4 pp16 vpp4, embedding and loss counted as layers (the
    Megatron-Bridge GB200 recipe): rank 0's first chunk holds the embedding and one layer,
    so rank 1 peaks. It holds Megatron's interleaved warm-up, (p - r - 1)·2 + (v - 1)·p,
    plus the microbatch of its first steady forward (``get_pp_rank_microbatches`` and
    ``max_outstanding_backprops = num_warmup_microbatches + 1`` in
    megatron/core/pipeline_parallel/schedules.py), and its layer-microbatches are within 2%
    of what `theoretical_memory_usage` assumes for stage 0: L/p layers times p microbatches
    times (1 + (p - 1)/(p·v)) (megatron/training/theoretical_memory_usage.py)."""
    model = get_preset("llama3.1-405b")
    job = TrainingJob(seq_length=8192, global_batch_size=1536, precision="fp8")
    plan = ParallelPlan.for_world(
        256,
        tp=4,
        pp=16,
        vpp=4,
        sequence_parallel=True,
        distributed_optimizer=True,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    stages = memory_per_stage(model, job, plan, allowance=NO_ALLOWANCE)
    peak = max(stages, key=lambda stage: stage.total_bytes)
    p, v, r = 16, 4, peak.pp_rank
    assert r == 1
    assert peak.in_flight_microbatches == (p - r - 1) * 2 + (v - 1) * p + 1
    m = plan.num_microbatches(job.global_batch_size)
    counts = in_flight_chunk_counts(p, v, r, m)
    held = sum(n * len(chunk_layers(model, plan, r, c)) for c, n in enumerate(counts))
    estimator = model.num_layers / p * p * (1 + (p - 1) / (p * v))
    assert held / estimator == pytest.approx(1.0, abs=0.02)


def test_a_transformer_mtp_layer_keeps_one_layer_of_activations_per_microbatch() -> None:
    """DeepSeek-V3's MTP depth is one layer of its last layer's kind (Megatron-core
    ``MultiTokenPredictionLayer``): on the last stage it keeps what one more decoder layer
    of that kind would keep, plus what the depth keeps outside it
    (`costmodel.mtp_activations.mtp_depth_tensors`), for each of that stage's in-flight
    microbatches."""
    model = get_preset("deepseek-v3")
    job = TrainingJob(seq_length=4096, global_batch_size=256)
    plan = ParallelPlan(tp=2, pp=4, ep=8, etp=1, dp=16, decoder_last_pipeline_num_layers=13)
    without = model.replace(mtp_num_layers=0)
    longer = plan.replace(decoder_last_pipeline_num_layers=14)  # one more last-kind layer
    extra = without.replace(num_layers=62)
    last = stage_activations(model, job, plan, 3)
    assert last.mtp_bytes > 0
    assert last.layers_bytes - stage_activations(without, job, plan, 3).layers_bytes == (
        pytest.approx(last.mtp_bytes, rel=1e-12)
    )
    outside = sum(mtp_depth_tensors(model, job, plan).values())
    assert last.mtp_bytes == pytest.approx(
        stage_activations(extra, job, longer, 3).layers_bytes
        - stage_activations(without, job, plan, 3).layers_bytes
        + last.in_flight_microbatches * outside,
        rel=1e-12,
    )
    assert stage_activations(model, job, plan, 0) == stage_activations(without, job, plan, 0)
