"""The ``torch`` runtime's chunk costs and per-stage work after the pipeline, for the event
loop (`costmodel.iteration`).

The schedule itself is timed by the same loop as for Megatron-LM (`costmodel.pipeline_sim`
over `costmodel.schedules`): torch.distributed.pipelining's 1F1B and interleaved 1F1B run
Megatron's action order. Sends block (`costmodel.runtimes.torch.passes`).

Chunk costs: the operator lists of the chunk's layers, embedding and head priced on the
host (`costmodel.runtimes.torch.passes.executor_pass_costs`), plus FSDP2's parameter all-gathers,
which run inside every forward and, when the modules reshard after forward
(`specs.data_parallel.fsdp2_reshard_after_forward`), in backwards too, the root module
included, as often as `costmodel.runtimes.torch.sync.fsdp_gather_shares` counts; they are
counted as compute of the pass they block.

Stage tail: from the end of the stage's last backward, in the executor's order, the
pipelining schedule's gradient division, the gradient reductions (FSDP2 reduce-scatters,
DDP buckets or the bucketed all-reduce, the expert reduction, the tied-embedding
all-reduce), one after the other, then AdamW.
"""

from __future__ import annotations

from costmodel.collectives import collective_time_s
from costmodel.passes import ChunkCost, CommGroups, PassCost, StageTail
from costmodel.pipeline_sim import TimedAction
from costmodel.rank_params import chunk_params, layer_params_per_rank
from costmodel.runtimes.torch.host_rates import HostRates
from costmodel.runtimes.torch.ops import FP32, ModuleOps
from costmodel.runtimes.torch.passes import executor_pass_costs, scale_grads_s
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.sync import (
    Reduction,
    StageLayout,
    bucketed_reduce,
    ddp_reduce,
    fsdp_gather_s,
    fsdp_gather_shares,
    fsdp_reduce,
    layer_tensors,
    norm_tensors,
    optimizer_s,
    stage_layout,
)
from costmodel.schedules import ChunkPosition, plan_stage_chunks
from costmodel.topology import GroupPlacement, PlanPlacements
from profiles.schema import HardwareProfile
from specs.data_parallel import fsdp2_reshard_after_forward
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan


def _fsdp_modules(
    model: ModelSpec, plan: ParallelPlan, layers: range, first: bool, last: bool
) -> list[tuple[float, int, bool]]:
    """(dense parameters, tensors, is_block) of each FSDP2 module of a chunk: its blocks,
    then the chunk root (embedding, final norm, output) when it holds any."""
    counts = count_params(model)
    mask = model.moe_layer_mask()
    modules = []
    for i in layers:
        params = layer_params_per_rank(model, plan, i).dense
        modules.append((params, layer_tensors(model, mask[i])[0], True))
    matrix = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
    root, tensors = 0.0, 0
    if first:
        root, tensors = root + matrix, tensors + 1
    if last:
        root += counts.final_norm
        tensors += norm_tensors(model)
        if not (model.tied_embeddings and first):
            root, tensors = root + matrix, tensors + 1
    if root > 0:
        modules.append((root, tensors, False))
    return modules


def _fsdp_pass_s(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    rates: HostRates,
    placements: PlanPlacements,
    at: ChunkPosition,
    host_s: tuple[float, float],
    num_microbatches: int,
) -> tuple[float, float]:
    """(forward, backward) seconds of one microbatch's FSDP2 all-gathers in a chunk whose
    passes do ``host_s`` (forward, backward) of host work per layer: every module's gather
    times the gathers per microbatch of the chunk (`fsdp_gather_shares`)."""
    reshard = fsdp2_reshard_after_forward(plan)
    if reshard is None or plan.world_size == 1:
        return 0.0, 0.0
    groups = (placements["dp-cp"], placements["edp"])
    modules = [
        (p, t, groups[0]) for p, t, _ in _fsdp_modules(model, plan, at.layers, at.first, at.last)
    ]
    mats = 3 if model.activation == "swiglu" else 2
    for i in at.layers:
        experts = layer_params_per_rank(model, plan, i).expert
        if experts:
            modules.append((experts, mats, groups[1]))
    forward = backward = 0.0
    for params, tensors, group in modules:
        forward += fsdp_gather_s(
            profile, rates, params, tensors, group, host_s=host_s[0], backward=False
        )
        if reshard:
            backward += fsdp_gather_s(
                profile, rates, params, tensors, group, host_s=host_s[1], backward=True
            )
    shares = fsdp_gather_shares(plan, num_microbatches, at.stage, at.chunk)
    return forward * shares[0], backward * shares[1]


def executor_chunk_costs(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups,
    placements: PlanPlacements,
) -> tuple[tuple[ChunkCost, ...], ...]:
    """Per stage, per chunk: one microbatch's costs on a rank of the executor."""
    rates = host_rates(profile)
    num_microbatches = max(plan.num_microbatches(job.global_batch_size), 1)
    # every chunk of the plan has the same rank shape: each layer kind is priced once
    layer_kinds: dict[bool, ModuleOps] = {}

    def cost(at: ChunkPosition) -> ChunkCost:
        fwd, bwd, rec = executor_pass_costs(
            model, job, plan, profile, rates, groups, at.stage, at.chunk, layer_kinds
        )
        per_layer = max(len(at.layers), 1)
        host_s = (fwd.compute_s / per_layer, bwd.compute_s / per_layer)
        gather_f, gather_b = _fsdp_pass_s(
            model, plan, profile, rates, placements, at, host_s, num_microbatches
        )
        held = chunk_params(model, plan, at.layers, first=at.first, last=at.last)
        return ChunkCost(
            forward=fwd.plus(PassCost(compute_s=gather_f)),
            backward=bwd.plus(PassCost(compute_s=gather_b)),
            recompute=rec,
            dense_params=held.dense,
            expert_params=held.expert,
        )

    return tuple(
        tuple(cost(at) for at in plan_stage_chunks(model, plan, s)) for s in range(plan.pp)
    )


def _reductions(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    rates: HostRates,
    placements: PlanPlacements,
    stage: int,
    params: StageLayout,
) -> list[Reduction]:
    """The stage's gradient reductions, in order."""
    out: list[Reduction] = []
    dense_group, expert_group = placements["dp-cp"], placements["edp"]
    if fsdp2_reshard_after_forward(plan) is not None:
        for at in plan_stage_chunks(model, plan, stage):
            mods = _fsdp_modules(model, plan, at.layers, at.first, at.last)
            for j, (p, tensors, _) in enumerate(mods):
                name = f"dp reduce_scatter c{at.chunk} module {j}"
                out.append(fsdp_reduce(profile, rates, p, tensors, dense_group, name))
        if params.expert:
            out.append(
                fsdp_reduce(
                    profile,
                    rates,
                    params.expert,
                    params.expert_tensors,
                    expert_group,
                    "dp reduce_scatter experts",
                )
            )
    elif plan.world_size > 1:
        if dense_group.size > 1:
            if plan.tp == 1:
                out += ddp_reduce(
                    profile, rates, plan, params.dense, params.dense_tensors, dense_group
                )
            else:
                out += bucketed_reduce(
                    profile, rates, plan, params.dense, params.dense_tensors, dense_group, "dense"
                )
        if params.expert:
            out += bucketed_reduce(
                profile, rates, plan, params.expert, params.expert_tensors, expert_group, "experts"
            )
    if model.tied_embeddings and plan.pp > 1 and stage in (0, plan.pp - 1):
        size = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp * FP32
        pp = placements["pp"]
        pair = GroupPlacement(
            axes="embedding",
            size=2,
            num_nodes=pp.num_nodes,
            num_domains=pp.num_domains,
            ranks_per_node=2 if pp.num_nodes == 1 else 1,
            ranks_per_domain=2 if pp.num_domains == 1 else 1,
            nics_per_node=pp.nics_per_node,
        )
        seconds = collective_time_s(profile, "all_reduce", size, pair)
        seconds += rates.excess_s("all_reduce", 2)
        out.append(
            Reduction(name="embedding all_reduce", host_s=0.0, comm_s=seconds, size_bytes=size)
        )
    return out


def executor_stage_tail(
    model: ModelSpec,
    plan: ParallelPlan,
    profile: HardwareProfile,
    placements: PlanPlacements,
    stage: int,
    row: tuple[TimedAction, ...],
) -> StageTail:
    """Gradient division, reductions and AdamW of one rank of ``stage`` (module doc)."""
    rates = host_rates(profile)
    params = stage_layout(model, plan, stage)
    pipeline_end = row[-1].end_s
    clock = pipeline_end
    if plan.pp > 1:
        tensors = params.dense_tensors + params.expert_tensors
        clock += scale_grads_s(rates, tensors, params.dense + params.expert)
    dp_events = []
    for r in _reductions(model, plan, profile, rates, placements, stage, params):
        clock += r.host_s
        dp_events.append((r.name, clock, r.comm_s, r.size_bytes))
        clock += r.comm_s
    return StageTail(
        pipeline_end_s=pipeline_end,
        grads_done_s=clock,
        norm_allreduce_s=0.0,
        optimizer_s=optimizer_s(profile, rates, plan, params, placements),
        param_gather_s=0.0,
        dp_events=tuple(dp_events),
    )
