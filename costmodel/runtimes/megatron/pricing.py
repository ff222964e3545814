"""The ``megatron`` runtime's part of the event simulator (`costmodel.iteration`): one
training iteration of a plan, rank by rank, phase by phase.

Order of work, following Megatron-LM (megatron-facts.md §3, §5):

1. Chunk costs: each (stage, chunk) forward/backward per microbatch is the sum of its
   layers' `costmodel.runtimes.megatron.layer_costs` passes (plus the embedding on virtual
   stage 0 and the output layer and loss on the last; each MTP depth adds its layers, its
   embedding and ``eh_proj`` work, `costmodel.runtimes.megatron.mtp_costs`, and its output
   layer and loss), with recompute added to the backward.
2. The schedule (`costmodel.schedules.schedule_actions`) is timed by
   `costmodel.pipeline_sim.simulate_pipeline`. Pipeline sends carry [s/cp (/tp with SP),
   b, h] activations (§3.4): 1F1B sends are blocking (`batch_isend_irecv`), so they extend
   the sender's action; interleaved sends are asynchronous (`overlap_p2p_comm`, the
   default), so they only delay the receiver, unless `ExecutionOptions.overlap_p2p` is off
   (Megatron-LM 2021: blocking sends, optionally scattered over the tp ranks' NICs); the
   warmup forwards and cooldown backwards of an interleaved schedule send with blocking
   calls even then (`blocking_flush_sends`).
3. Gradient reduction per bucket over DP x CP (experts over expert-DP): reduce-scatter with
   the distributed optimizer, else all-reduce, of the main gradients (fp32 by default,
   `ExecutionOptions.main_grad_bytes`). With
   `overlap_grad_reduce` a bucket is launched once the last microbatch's backward has
   produced it (buckets fill in backward order during that action); Megatron buckets only
   the first chunk of the first stage and keeps one bucket per chunk elsewhere (§5.1).
   Without it, everything is reduced after the pipeline. Tied embeddings add the
   first/last-stage all-reduce; sequence parallelism adds the all-reduce of norm gradients
   over TP.
4. The optimizer step waits for every stage (the gradient-norm all-reduce for clipping is a
   barrier), then runs on each rank's shard; with the distributed optimizer the updated
   bf16 parameters are all-gathered, after the step or, with `overlap_param_gather`, under
   the next iteration's forwards (exposed as far as a bucket arrives after the forward
   that needs it).

Step 1 and the pipeline sends are priced here (`chunk_costs`, `pipeline_send_s`,
`blocking_sends`, `blocking_flush_sends`); steps 3 and 4 in
`costmodel.runtimes.megatron.stage_tail.stage_tail` (gradient buckets:
`costmodel.runtimes.megatron.grad_reduction`; optimizer step:
`costmodel.runtimes.megatron.optimizer_step`; parameter all-gather:
`costmodel.runtimes.megatron.param_gather`); the event loop (`costmodel.iteration`) times
step 2 and takes the breakdown below.

The breakdown is taken on the critical stage (the one that finishes its gradients last):
compute forward / backward / recompute, exposed TP / CP / EP communication, pipeline
sends (the delay they add over a run with free sends), the bubble (remaining idle time),
exposed gradient and parameter communication, and the optimizer step. The phases sum to
the iteration time.
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.activations import recomputed_layers
from costmodel.bf16_layers import bf16_layer_job, bf16_layer_options, bf16_layers
from costmodel.collectives import collective_time_s, p2p_time_s, pipeline_send_bytes
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.optimizer_passes import grad_accumulation_time_s
from costmodel.passes import ZERO, ChunkCost, CommGroups, PassCost
from costmodel.rank_params import position_params
from costmodel.runtimes.megatron.fp8_scaling import with_delayed_scaling
from costmodel.runtimes.megatron.layer_costs import layer_cost
from costmodel.runtimes.megatron.mtp_costs import mtp_depth_cost
from costmodel.runtimes.megatron.vocab_costs import embedding_cost, logits_cost
from costmodel.schedules import ChunkPosition, plan_pipeline_chunks
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


def chunk_costs(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[tuple[ChunkCost, ...], ...]:
    """Per stage, per chunk: the microbatch costs of its layers (step 1 of the module), each
    layer kept in bf16 (`costmodel.bf16_layers.bf16_layers`) priced as a bf16 job's layer
    of its kind (`costmodel.bf16_layers.bf16_layer_job`, `bf16_layer_options`). In
    fp8 jobs under the ``delayed`` recipe (`ExecutionOptions.fp8_recipe`), each chunk's
    forward and backward also reduce the stage's amaxes over ``groups.tp_dp_cp`` and update
    the scales (`costmodel.runtimes.megatron.fp8_scaling.with_delayed_scaling`)."""
    grad_bytes = ops.element_bytes(job.precision)
    mask = model.layer_kinds()
    depth_kinds = model.mtp_depth_kinds()
    kinds = {
        k: layer_cost(model, job, plan, profile, kind=k, groups=groups, options=options)
        for k in set(mask) | set(depth_kinds)
    }
    bf16 = bf16_layers(model, job, options)
    bf16_kinds = {
        k: layer_cost(
            model,
            bf16_layer_job(job),
            plan,
            profile,
            kind=k,
            groups=groups,
            options=bf16_layer_options(options),
        )
        for k in {mask[i] for i in bf16}
    }
    emb = embedding_cost(model, job, plan, profile, groups, options)
    out = logits_cost(model, job, plan, profile, groups, options)
    depth = mtp_depth_cost(model, job, plan, profile, groups, options)
    redo = recomputed_layers(model, plan) if plan.recompute == "full" else None

    def cost(at: ChunkPosition) -> ChunkCost:
        fwd = bwd = rec = ZERO
        for i in at.layers:
            layer = bf16_kinds[mask[i]] if i in bf16 else kinds[mask[i]]
            fwd, bwd = fwd.plus(layer.forward), bwd.plus(layer.backward)
            if redo is None or i in redo:
                rec = rec.plus(layer.recompute)
        for _ in range(at.mtp_layers):  # a depth: embedding, eh_proj, layers, output, loss
            fwd, bwd = fwd.plus(depth.forward), bwd.plus(depth.backward)
            if plan.checkpoints_mtp_depths:  # _checkpointed_forward reruns eh_proj
                rec = rec.plus(depth.projection_forward)
            for kind in depth_kinds:
                layer = kinds[kind]
                fwd, bwd = fwd.plus(layer.forward), bwd.plus(layer.backward)
                if plan.recompute != "full" or plan.checkpoints_mtp_depths:
                    rec = rec.plus(layer.recompute)
            fwd, bwd = fwd.plus(out[0]), bwd.plus(out[1])
        if at.first:
            fwd, bwd = fwd.plus(emb[0]), bwd.plus(emb[1])
        if at.last:
            fwd, bwd = fwd.plus(out[0]), bwd.plus(out[1])
        held = position_params(model, plan, at, job.lora)
        dense, expert = held.trained_dense, held.trained_expert  # a LoRA job: its adapters
        if not options.grad_accumulation_fusion:
            accumulate = grad_accumulation_time_s(
                profile, dense + expert, grad_bytes, options.main_grad_bytes
            )
            bwd = bwd.plus(PassCost(compute_s=accumulate))
        return ChunkCost(
            forward=fwd, backward=bwd, recompute=rec, dense_params=dense, expert_params=expert
        )

    grid = plan_pipeline_chunks(model, plan)
    costs = tuple(tuple(cost(at) for at in row) for row in grid)
    if job.precision != "fp8" or options.fp8_recipe != "delayed":
        return costs
    return tuple(
        with_delayed_scaling(
            row,
            at,
            model,
            profile,
            ep=plan.ep,
            group=groups.tp_dp_cp,
            mtp_checkpointed=plan.checkpoints_mtp_depths,
        )
        for row, at in zip(costs, grid, strict=True)
    )


def pipeline_send_s(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    placements: PlanPlacements,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[float, ...]:
    """Seconds to send one microbatch's activation across each stage boundary (§3.4), the
    last entry from the last stage back to the first (interleaved schedules).

    With `ExecutionOptions.pipeline_scatter_gather` and no sequence parallelism, each tp
    rank sends 1/tp of the tensor over its own link and the receiving ranks all-gather it
    over their tensor-parallel group (Narayanan et al. 2021 §4.1)."""
    if plan.pp == 1:
        return (0.0,)
    size = pipeline_send_bytes(model, job, plan)
    sp = plan.tp if plan.sequence_parallel and plan.tp > 1 else 1
    if options.pipeline_scatter_gather and sp == 1 and plan.tp > 1:
        gather = collective_time_s(profile, "all_gather", size, placements["tp"])
        return tuple(
            p2p_time_s(profile, size / plan.tp, intra=intra) + gather
            for intra in placements.pp_hop_intra
        )
    return tuple(p2p_time_s(profile, size, intra=intra) for intra in placements.pp_hop_intra)


def blocking_sends(plan: ParallelPlan, options: ExecutionOptions = DEFAULT_OPTIONS) -> bool:
    """True when pipeline sends extend the sending action: always under 1F1B (blocking
    `batch_isend_irecv`), and for interleaved schedules without `overlap_p2p`."""
    return plan.pp > 1 and (plan.vpp == 1 or not options.overlap_p2p)


def blocking_flush_sends(plan: ParallelPlan, options: ExecutionOptions = DEFAULT_OPTIONS) -> bool:
    """True for interleaved schedules with asynchronous sends (`overlap_p2p`): their warmup
    forwards and cooldown backwards still send with blocking calls.

    Megatron-core `forward_backward_pipelining_with_interleaving` overlaps the pipeline
    sends of the steady state only: unless ``overlap_p2p_comm_warmup_flush`` is set (default
    False, ``--overlap-p2p-communication-warmup-flush``), each warmup forward ends with a
    blocking ``send_forward_recv_forward`` and each cooldown backward with a blocking
    ``send_backward_recv_backward``, so the sending stage waits for the transfer. Releases
    before the tunable schedule of 2024-11 (core_r0.8.0) send the cooldown the same way and
    post each warmup send asynchronously but wait for it at the top of the next warmup
    iteration, before its forward: the stage is held just as long."""
    return plan.pp > 1 and plan.vpp > 1 and options.overlap_p2p
