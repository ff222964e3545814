"""Gradient synchronization, FSDP2 parameter gathers and AdamW of the executor on a CPU
rank (`executor.data_parallel`, `executor.engine`).

Which mechanism runs (`executor.engine._wrap_data_parallel`, `GradientSync`,
`specs.data_parallel.fsdp2_reshard_after_forward`):
- ``distributed_optimizer`` and Megatron-FSDP's ``optim``, ``optim_grads`` and
  ``optim_grads_params``: FSDP2 ``fully_shard`` per transformer block (routed experts
  on their own expert-data-parallel mesh) and per chunk (the root: embedding, final norm,
  output). Every forward all-gathers each module's parameters; when the modules reshard
  after forward (the distributed optimizer with pp = 1, ``optim_grads_params``) the
  backward gathers them again (the root too: ten gathers per microbatch for a 4-layer
  chunk, traced), as often as `fsdp_gather_shares` counts. Only the last microbatch synchronizes:
  each module's gradients are reduce-scattered (on gloo an all-reduce underneath; the
  profile's ``reduce_scatter`` fit measures exactly that). Host work per gather: the
  profile's one-tensor module figure (`HostRates.fsdp_gather_s`, measured over the ranks
  with a collective of `FSDP_PROBE_BYTES`, the median of adjacent step pairs: a typical
  call, without the preemptions a shared host adds now and then), the collective's
  typical excess (`HostRates.excess_s`, what every waited call pays on average beyond
  that, as in `_time`), plus
  `HostRates.fsdp_gather_tensor_s` per further tensor, the shards copied in (2·P/n·e) and
  the gathered buffer copied out (2·P·e), and the collective's time beyond the probe's; per
  reduce-scatter: `HostRates.fsdp_reduce_s`, the reduce-scatter's typical excess, plus
  `HostRates.fsdp_reduce_tensor_s` per further tensor, the gradients
  flattened (2·P·e), divided and the shard copied out (4·P/n·e), and the reduce-scatter
  beyond the probe's.
- otherwise (Megatron-FSDP ``no_shard`` included) tp = 1: DDP over dp·cp. On the
  last microbatch each gradient is copied into its bucket (2·P·e, two dispatches per
  tensor), each bucket is divided by the group size and all-reduced, and the results are
  copied back (4·P·e). Every bucket, the first included, holds the plan's bucket size: the
  executor passes ``bucket_cap_mb``, and torch keeps the 1 MiB first bucket
  (``dist._DEFAULT_FIRST_BUCKET_BYTES``) only when ``bucket_cap_mb`` is left unset
  (torch 2.13 ``torch/nn/parallel/distributed.py``, ``BucketCapacityConfig``); from the
  second step buckets follow gradient-ready order.
- otherwise tp > 1: the local gradient shards are all-reduced in buckets after the backward
  (`BucketedAllReduce`: per tensor a ``to_local``, a reshape and a copy back; per bucket a
  concatenation, the all-reduce and a division, 6·B·e).
- routed experts outside FSDP2 (world > 1): the same bucketed path over the expert-data-
  parallel group (no collective when that group has one rank; the division still runs).
- a tied embedding split over the first and last stage: all-reduced over those two ranks.

A rank has one compute thread and the ranks fill the cores, so gloo's worker thread
competes with the backward for the same core: the reductions are counted after the
backward, not under it (`overlap_grad_reduce` changes nothing here).

AdamW (`executor.engine._make_optimizer`: ``torch.optim.AdamW``, weight decay 0, no ``foreach`` on
CPU tensors, so the single-tensor loop): per parameter tensor `HostRates.adamw_tensor_s`
(`HostRates.dtensor_adamw_tensor_s` for DTensor parameters: tp > 1, FSDP2) and 28 bytes per
parameter at `HostRates.adamw_Bps`, on the local shard; replicated norm
weights under sequence parallelism hold partial gradients, which the optimizer all-reduces
on each of the three operators that read them (lerp_, and addcmul_'s two operands).
``zero_grad(set_to_none=True)`` costs a dispatch per tensor. The step ends with the loss
all-reduce over the world (`Engine._global_loss`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.collectives import collective_time_s
from costmodel.rank_params import layer_params_per_rank
from costmodel.runtimes.torch.fsdp_rates import PROBE_GATHER_BYTES, PROBE_TENSORS
from costmodel.runtimes.torch.host_rate_fits import ADAMW_BYTES_PER_PARAM, FSDP_PROBE_BYTES
from costmodel.runtimes.torch.host_rates import HostRates
from costmodel.runtimes.torch.ops import FP32
from costmodel.schedules import chunk_layers, schedule_actions
from costmodel.topology import GroupPlacement, PlanPlacements, world_placement
from profiles.schema import HardwareProfile
from specs.data_parallel import fsdp2_reshard_after_forward
from specs.errors import SpecError
from specs.model import ModelSpec
from specs.params import count_params, padded_vocab_size
from specs.plan import ParallelPlan

SP_NORM_GRAD_READS = 3
"""All-reduces of a partial norm-weight gradient per AdamW step (lerp_ and addcmul_'s two
operands each redistribute it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StageLayout:
    """Parameters and parameter tensors one rank of a stage holds, as the executor groups
    them (parameter counts from `costmodel.rank_params.layer_params_per_rank`)."""

    dense: float
    """Dense parameters (reduced over dp·cp)."""
    expert: float
    """Routed-expert parameters (reduced over expert dp)."""
    dense_tensors: int
    """Dense parameter tensors."""
    expert_tensors: int
    """Routed-expert parameter tensors (stacked: one per weight matrix of a layer)."""
    norm: float
    """Norm weights and biases (replicated under TP)."""
    norm_tensors: int
    """Norm parameter tensors."""
    blocks: tuple[float, ...]
    """Dense parameters of each FSDP2 module: every block, then the chunk roots."""


def norm_tensors(model: ModelSpec) -> int:
    return 1 if model.normalization == "rmsnorm" else 2


def layer_tensors(model: ModelSpec, is_moe: bool) -> tuple[int, int]:
    """(dense, expert) parameter tensors of one layer."""
    bias = 2 if model.add_bias_linear else 1
    qkv = 2 if (model.add_bias_linear or model.add_qkv_bias) else 1
    mats = 3 if model.activation == "swiglu" else 2
    dense = 3 * qkv + bias + 2 * norm_tensors(model)
    if not is_moe:
        return dense + mats * bias, 0
    shared = mats * bias if model.moe_shared_expert_size else 0
    return dense + 1 + shared, mats


def stage_layout(model: ModelSpec, plan: ParallelPlan, stage: int) -> StageLayout:
    """The `StageLayout` of one rank of ``stage``: per chunk its blocks, then the chunk
    root (embedding on virtual stage 0; final norm and output layer on the last)."""
    counts = count_params(model)
    mask = model.moe_layer_mask()
    dense = expert = norm = 0.0
    dense_t = expert_t = norm_t = 0
    blocks: list[float] = []
    matrix = padded_vocab_size(model.vocab_size, plan.tp) * model.hidden_size / plan.tp
    for chunk in range(plan.vpp):
        root = 0.0
        v = chunk * plan.pp + stage
        for i in chunk_layers(model, plan, stage, chunk):
            layer = counts.layers[i]
            held = layer_params_per_rank(model, plan, i)
            dense += held.dense
            norm += layer.norms
            blocks.append(held.dense)
            expert += held.expert
            d, e = layer_tensors(model, mask[i])
            dense_t, expert_t, norm_t = dense_t + d, expert_t + e, norm_t + 2 * norm_tensors(model)
        if v == 0:
            root += matrix + (counts.embedding - model.vocab_size * model.hidden_size)
            dense_t += 1 + (model.position_embedding == "learned")
        if v == plan.pp * plan.vpp - 1:
            root += counts.final_norm
            norm += counts.final_norm
            dense_t += norm_tensors(model)
            norm_t += norm_tensors(model)
            if not (model.tied_embeddings and v == 0):
                root += matrix
                dense_t += 1
        dense += root
        blocks.append(root)
    return StageLayout(
        dense=dense,
        expert=expert,
        dense_tensors=dense_t,
        expert_tensors=expert_t,
        norm=norm,
        norm_tensors=norm_t,
        blocks=tuple(blocks),
    )


def _time(
    profile: HardwareProfile, rates: HostRates, op: str, size: float, group: GroupPlacement
) -> float:
    """A waited-for collective: the fit plus its typical excess (`HostRates.excess_s`)."""
    if group.size < 2 or size <= 0:
        return 0.0
    return collective_time_s(profile, op, size, group) + rates.excess_s(op, group.size)


def _beyond_probe_s(
    profile: HardwareProfile,
    rates: HostRates,
    op: str,
    size: float,
    group: GroupPlacement,
    probe_bytes: float = FSDP_PROBE_BYTES,
) -> float:
    """A module's collective beyond the one a probe's figure already holds (by default the
    idle module of `FSDP_PROBE_BYTES`, `profiles.profiler.framework`)."""
    probe = _time(profile, rates, op, probe_bytes, group)
    return max(_time(profile, rates, op, size, group) - probe, 0.0)


def _gather_copies_s(rates: HostRates, params: float, n: int) -> float:
    """A gather's copies: the shards in (2·P/n·e) and the gathered buffer out (2·P·e)."""
    return (2 * params / n + 2 * params) * FP32 / rates.bandwidth_Bps


def fsdp_gather_s(
    profile: HardwareProfile,
    rates: HostRates,
    params: float,
    tensors: float,
    group: GroupPlacement,
    *,
    host_s: float,
    backward: bool,
) -> float:
    """One FSDP2 all-gather of a module of ``params`` parameters in a pass with ``host_s``
    of host work per layer: from the probe in context (`costmodel.runtimes.torch.fsdp_rates`) when
    the profile has it, else from the idle module's figures (module doc)."""
    n = group.size
    if rates.fsdp_context is not None:
        probe_params = PROBE_GATHER_BYTES / FP32
        seconds = rates.fsdp_context.extra_s(backward=backward, host_s=host_s)
        seconds += (tensors - PROBE_TENSORS) * rates.fsdp_gather_tensor_s
        seconds += _gather_copies_s(rates, params, n) - _gather_copies_s(rates, probe_params, n)
        wire = _time(profile, rates, "all_gather", params * FP32, group)
        seconds += wire - _time(profile, rates, "all_gather", PROBE_GATHER_BYTES, group)
        return max(seconds, 0.0)
    host = rates.fsdp_gather_s + max(tensors - 1, 0) * rates.fsdp_gather_tensor_s
    host += _gather_copies_s(rates, params, n)
    waited = rates.excess_s("all_gather", n)
    return host + waited + _beyond_probe_s(profile, rates, "all_gather", params * FP32, group)


def fsdp_gather_shares(
    plan: ParallelPlan, num_microbatches: int, stage: int, chunk: int
) -> tuple[float, float]:
    """(forward, backward) FSDP2 all-gathers of one chunk's modules per microbatch, on
    average over the step; (0, 0) without FSDP2.

    Without resharding after forward every forward is priced with a gather and no backward
    is. With it and pp = 1 each forward and each backward gathers (gradient accumulation
    reshards after every backward). With it and pp > 1, torch pipelining keeps the weights
    gathered after each backward (``set_reshard_after_backward(False)`` until the step's
    gradient reduction), so along the chunk's actions in the schedule's order
    (`costmodel.schedules.schedule_actions`) a pass gathers only when the previous pass of
    the chunk was a forward (which resharded) or there was none.
    """
    reshard = fsdp2_reshard_after_forward(plan)
    if reshard is None:
        return 0.0, 0.0
    if not reshard:
        return 1.0, 0.0
    m = max(num_microbatches, 1)
    if plan.pp == 1:
        return 1.0, 1.0
    try:
        actions = schedule_actions(plan.pp, plan.vpp, m)[stage]
    except SpecError:  # a schedule Megatron refuses: every pass gathers
        return 1.0, 1.0
    gathers = {"F": 0, "B": 0}
    sharded = True
    for action in actions:
        if action.chunk == chunk:
            gathers[action.phase] += sharded
            sharded = action.phase == "F"
    return gathers["F"] / m, gathers["B"] / m


@dataclass(frozen=True, kw_only=True, slots=True)
class Reduction:
    """One gradient collective after the backward, and the host work around it."""

    name: str
    """Timeline name, e.g. ``dp all_reduce ddp bucket 0``."""
    host_s: float
    """Copies, divisions and framework bookkeeping of the call (the rank's thread)."""
    comm_s: float
    """The collective itself (the profile's α-β fit)."""
    size_bytes: float
    """nccl-tests size of the collective."""


def fsdp_reduce(
    profile: HardwareProfile,
    rates: HostRates,
    params: float,
    tensors: float,
    group: GroupPlacement,
    name: str,
) -> Reduction:
    """One FSDP2 gradient reduce-scatter of a module (module doc)."""
    n = group.size
    host = rates.fsdp_reduce_s + max(tensors - 1, 0) * rates.fsdp_reduce_tensor_s
    host += (2 * params + 4 * params / n) * FP32 / rates.bandwidth_Bps
    size = params * FP32
    return Reduction(
        name=name,
        host_s=host,
        comm_s=rates.excess_s("reduce_scatter", n)
        + _beyond_probe_s(profile, rates, "reduce_scatter", size, group),
        size_bytes=size,
    )


def _buckets(total: float, first: float, rest: float) -> list[float]:
    """Bucket sizes (parameters): ``first`` then ``rest`` each, the last one smaller."""
    if total <= 0:
        return []
    sizes = [min(first, total)]
    left = total - sizes[0]
    if left > 0:
        n = math.ceil(left / rest)
        sizes += [rest] * (n - 1) + [left - rest * (n - 1)]
    return sizes


def ddp_reduce(
    profile: HardwareProfile,
    rates: HostRates,
    plan: ParallelPlan,
    params: float,
    tensors: int,
    group: GroupPlacement,
) -> list[Reduction]:
    """DDP's reduction on the last microbatch, bucket by bucket (module doc)."""
    bucket = plan.bucket_size_params()
    sizes = _buckets(params, bucket, bucket)
    out = []
    for j, size in enumerate(sizes):
        share = size / params
        host = share * (2 * tensors * rates.dispatch_s + 6 * size * FP32 / rates.bandwidth_Bps)
        host += rates.dispatch_s  # the bucket's division
        out.append(_bucket(profile, rates, f"dp all_reduce ddp bucket {j}", host, size, group))
    return out


def _bucket(
    profile: HardwareProfile,
    rates: HostRates,
    name: str,
    host_s: float,
    params: float,
    group: GroupPlacement,
) -> Reduction:
    """One fp32 gradient bucket of ``params`` all-reduced over ``group``."""
    size = params * FP32
    comm = _time(profile, rates, "all_reduce", size, group)
    return Reduction(name=name, host_s=host_s, comm_s=comm, size_bytes=size)


def bucketed_reduce(
    profile: HardwareProfile,
    rates: HostRates,
    plan: ParallelPlan,
    params: float,
    tensors: int,
    group: GroupPlacement,
    name: str,
) -> list[Reduction]:
    """`BucketedAllReduce.sync` over ``group``, bucket by bucket (module doc)."""
    sizes = _buckets(params, plan.bucket_size_params(), plan.bucket_size_params())
    unwrap = rates.dtensor_to_local_s if plan.tp > 1 else 0.0
    out = []
    for j, size in enumerate(sizes):
        share = size / params
        host = share * tensors * (unwrap + 3 * rates.dispatch_s)
        host += 2 * rates.dispatch_s + 6 * size * FP32 / rates.bandwidth_Bps
        out.append(_bucket(profile, rates, f"dp all_reduce {name} bucket {j}", host, size, group))
    return out


def optimizer_s(
    profile: HardwareProfile,
    rates: HostRates,
    plan: ParallelPlan,
    params: StageLayout,
    placements: PlanPlacements,
) -> float:
    """AdamW, ``zero_grad`` and the step-end loss all-reduce of one rank (module doc)."""
    dense, expert = params.dense, params.expert
    sharded = fsdp2_reshard_after_forward(plan) is not None
    if sharded:
        dense /= placements["dp-cp"].size
        expert /= placements["edp"].size
    tensors = params.dense_tensors + params.expert_tensors
    dtensor = plan.tp > 1 or (sharded and plan.world_size > 1)
    per_tensor = rates.dtensor_adamw_tensor_s if dtensor else rates.adamw_tensor_s
    seconds = tensors * (per_tensor + rates.dispatch_s)
    seconds += ADAMW_BYTES_PER_PARAM * (dense + expert) / rates.adamw_Bps
    if plan.sequence_parallel and plan.tp > 1:
        width = params.norm / max(params.norm_tensors, 1)
        per = _time(profile, rates, "all_reduce", width * FP32, placements["tp"])
        seconds += SP_NORM_GRAD_READS * params.norm_tensors * per
    world = plan.world_size
    if world > 1:
        seconds += _time(profile, rates, "all_reduce", FP32, world_placement(profile, placements))
    return seconds
