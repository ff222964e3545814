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

from dataclasses import dataclass

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
from costmodel.runtimes.megatron.layer_costs import LayerCost, layer_cost
from costmodel.runtimes.megatron.mtp_costs import MtpDepthCost, mtp_depth_cost
from costmodel.runtimes.megatron.vocab_costs import embedding_cost, logits_cost
from costmodel.schedules import ChunkPosition, plan_pipeline_chunks
from costmodel.topology import PlanPlacements
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.layer_kinds import LayerKind
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
    """Per stage, per chunk: the microbatch costs of its layers (step 1 of the module,
    `chunk_cost` of the `ChunkPrices`). In fp8 jobs under the ``delayed`` recipe
    (`ExecutionOptions.fp8_recipe`), each chunk's forward and backward also reduce the
    stage's amaxes over ``groups.tp_dp_cp`` and update the scales
    (`costmodel.runtimes.megatron.fp8_scaling.with_delayed_scaling`)."""
    prices = chunk_prices(model, job, plan, profile, groups, options)
    grid = plan_pipeline_chunks(model, plan)
    costs = tuple(
        tuple(chunk_cost(model, job, plan, profile, options, prices, at) for at in row)
        for row in grid
    )
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


@dataclass(frozen=True, kw_only=True)
class ChunkPrices:
    """The per-microbatch costs a chunk sums: each layer kind's `LayerCost`, the bf16 layers'
    own, one MTP depth's, the embedding's and the output layer's."""

    kinds: tuple[LayerKind, ...]
    """Each layer's kind (`ModelSpec.layer_kinds`)."""
    depth_kinds: tuple[LayerKind, ...]
    """The layer kinds of one MTP depth (`ModelSpec.mtp_depth_kinds`)."""
    layers: dict[LayerKind, LayerCost]
    """Layer kind -> its cost (`layer_costs.layer_cost`)."""
    bf16: frozenset[int]
    """Global indices of the layers kept in bf16 (`costmodel.bf16_layers.bf16_layers`)."""
    bf16_layers: dict[LayerKind, LayerCost]
    """Layer kind -> its cost as a bf16 job's layer (`costmodel.bf16_layers.bf16_layer_job`,
    `bf16_layer_options`), for the kinds of the bf16 layers."""
    embedding: tuple[PassCost, PassCost]
    """(forward, backward) of the embedding (`vocab_costs.embedding_cost`)."""
    logits: tuple[PassCost, PassCost]
    """(forward, backward) of the output layer and loss (`vocab_costs.logits_cost`)."""
    depth: MtpDepthCost
    """One MTP depth's embedding and ``eh_proj`` work (`mtp_costs.mtp_depth_cost`)."""
    redo: frozenset[int] | None
    """Under full recompute, the layers whose forward reruns
    (`costmodel.activations.recomputed_layers`); None otherwise (every layer's recompute
    modules rerun)."""

    def layer(self, index: int) -> LayerCost:
        """The cost of layer ``index`` (global): its bf16 cost when kept in bf16."""
        kind = self.kinds[index]
        return self.bf16_layers[kind] if index in self.bf16 else self.layers[kind]


def chunk_prices(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups,
    options: ExecutionOptions,
) -> ChunkPrices:
    """The `ChunkPrices` of a plan: every layer kind of the model and of its MTP depths
    priced once, and each kind of a layer kept in bf16 priced again as a bf16 job's layer of
    its kind (`costmodel.bf16_layers.bf16_layer_job`, `bf16_layer_options`)."""
    mask = model.layer_kinds()
    depth_kinds = model.mtp_depth_kinds()
    bf16 = bf16_layers(model, job, options)
    return ChunkPrices(
        kinds=mask,
        depth_kinds=depth_kinds,
        layers={
            k: layer_cost(model, job, plan, profile, kind=k, groups=groups, options=options)
            for k in set(mask) | set(depth_kinds)
        },
        bf16=bf16,
        bf16_layers={
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
        },
        embedding=embedding_cost(model, job, plan, profile, groups, options),
        logits=logits_cost(model, job, plan, profile, groups, options),
        depth=mtp_depth_cost(model, job, plan, profile, groups, options),
        redo=recomputed_layers(model, plan) if plan.recompute == "full" else None,
    )


def chunk_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    options: ExecutionOptions,
    prices: ChunkPrices,
    at: ChunkPosition,
) -> ChunkCost:
    """The microbatch cost of the chunk ``at``: its layers (`_layer_passes`), its MTP depths
    (`_mtp_depth_passes`), the embedding on the first chunk, the output layer and loss on
    the last, and, without `ExecutionOptions.grad_accumulation_fusion`, the backward's
    separate accumulation of the chunk's trained parameters' gradients into the main
    gradients (`costmodel.optimizer_passes.grad_accumulation_time_s`; a LoRA job's
    adapters, `costmodel.rank_params.position_params`)."""
    fwd, bwd, rec = _layer_passes(prices, at)
    fwd, bwd, rec = _mtp_depth_passes(plan, prices, at, (fwd, bwd, rec))
    if at.first:
        fwd, bwd = fwd.plus(prices.embedding[0]), bwd.plus(prices.embedding[1])
    if at.last:
        fwd, bwd = fwd.plus(prices.logits[0]), bwd.plus(prices.logits[1])
    held = position_params(model, plan, at, job.lora)
    dense, expert = held.trained_dense, held.trained_expert  # a LoRA job: its adapters
    if not options.grad_accumulation_fusion:
        accumulate = grad_accumulation_time_s(
            profile, dense + expert, ops.element_bytes(job.precision), options.main_grad_bytes
        )
        bwd = bwd.plus(PassCost(compute_s=accumulate))
    return ChunkCost(
        forward=fwd, backward=bwd, recompute=rec, dense_params=dense, expert_params=expert
    )


def _layer_passes(prices: ChunkPrices, at: ChunkPosition) -> tuple[PassCost, PassCost, PassCost]:
    """(forward, backward, recompute) of the chunk's layers, in layer order; a layer's
    recompute counts unless full recompute leaves it out (`ChunkPrices.redo`)."""
    fwd = bwd = rec = ZERO
    for i in at.layers:
        layer = prices.layer(i)
        fwd, bwd = fwd.plus(layer.forward), bwd.plus(layer.backward)
        if prices.redo is None or i in prices.redo:
            rec = rec.plus(layer.recompute)
    return fwd, bwd, rec


def _mtp_depth_passes(
    plan: ParallelPlan,
    prices: ChunkPrices,
    at: ChunkPosition,
    passes: tuple[PassCost, PassCost, PassCost],
) -> tuple[PassCost, PassCost, PassCost]:
    """(forward, backward, recompute) ``passes`` with the chunk's MTP depths added, each its
    embedding and ``eh_proj`` work, its layers, its output layer and its loss
    (`costmodel.runtimes.megatron.mtp_costs`). With `ParallelPlan.checkpoints_mtp_depths`
    the recompute reruns ``eh_proj`` (Megatron-core ``_checkpointed_forward``) and the
    depth's layers; without full recompute, the layers' recompute modules rerun."""
    fwd, bwd, rec = passes
    for _ in range(at.mtp_layers):
        fwd, bwd = fwd.plus(prices.depth.forward), bwd.plus(prices.depth.backward)
        if plan.checkpoints_mtp_depths:
            rec = rec.plus(prices.depth.projection_forward)
        for kind in prices.depth_kinds:
            layer = prices.layers[kind]
            fwd, bwd = fwd.plus(layer.forward), bwd.plus(layer.backward)
            if plan.recompute != "full" or plan.checkpoints_mtp_depths:
                rec = rec.plus(layer.recompute)
        fwd, bwd = fwd.plus(prices.logits[0]), bwd.plus(prices.logits[1])
    return fwd, bwd, rec


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
