"""The executor's step around the layers: per-microbatch bookkeeping, pipelining, gradient
synchronization and AdamW, on a CPU rank (`executor.engine`, `.pipeline`,
`.data_parallel`).

Pass costs (`executor_pass_costs`) price the operator lists of `costmodel.runtimes.torch.layers`
with `costmodel.runtimes.torch.host_rates.HostRates` and time their collectives with the profile's
gloo fits (`costmodel.collectives`) plus the typical excess of a call waited for after a stretch of
host work (`HostRates.waited_excess_s`: the op's own excess, or the ranks' drift between two
collectives when larger), the functional call's extra (`HostRates.functional_s`) and, for the ``tp``
lane, whose collectives are DTensor redistributions, their extra (`HostRates.redistribute_s`), all
times the host section's `HostOverheads.layer_collective_scale` (1 unless calibrated); every
collective is exposed, because a rank computes on one thread and waits for each functional
collective at its next use.

Per microbatch, outside the layers:
- without pipelining (`Engine._run_accumulation`): the two row slices, ``loss / count``
  and its Div node, ``total += loss.detach()``, the ``ones_like`` seed and one
  ``backward()`` call (`HostRates.backward_call_s`);
- with pipelining (`torch.distributed.pipelining`, 1F1B or interleaved): each forward
  action detaches its received input and re-enables its gradient, and each action posts
  its receive and its send as P2P operations, one by one, and waits on them
  (`PIPELINE_ACTION_DISPATCHES` dispatches, and per posted operation `HostRates.p2p_post_s`:
  a virtual stage receives unless it is the first and sends unless it is the last, in
  either pass); each backward action is one ``backward()`` call. The sends of the
  schedule are waited for with the next receive, so they block like Megatron's 1F1B sends
  (`costmodel.runtimes.megatron.pricing.blocking_sends`); their time is the profile's ``send_recv``
  fit of the fp32 activation plus its typical excess. After the last backward the schedule divides
  every gradient by the number of microbatches (one operator and 2 passes per parameter tensor).

Recompute (`recompute_ops`) reruns the checkpointed forward in the backward; the
non-reentrant checkpoint's own cost (`checkpoint_hooks_s`) is paid in the forward and the
backward as the profile's in-context probe measured it
(`costmodel.runtimes.torch.checkpoint_rates`).

Not modelled: intra-op threads beyond the profile's (a one-rank run may use every core's
thread; the profile measures one per rank), DDP's per-forward Python bookkeeping,
and the host's other load (time slices lost to other processes lengthen every wait).
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.collectives import collective_time_s
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.torch.dtensor_rates import dtensor_context_s
from costmodel.runtimes.torch.host_rates import HostRates, backward_scale, layer_collective_scale
from costmodel.runtimes.torch.layers import (
    attention_core,
    embedding_ops,
    head_ops,
    layer_ops,
)
from costmodel.runtimes.torch.moe_exchange_rates import PROBE_TOKEN_BYTES
from costmodel.runtimes.torch.ops import (
    DTENSOR_RMSNORM_FORWARD,
    FP32,
    Comm,
    HostOps,
    ModuleOps,
    host_seconds,
)
from costmodel.runtimes.torch.shapes import RankShape, rank_shape
from costmodel.schedules import chunk_layers, virtual_stage
from costmodel.topology import GroupPlacement, product_placement
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import padded_vocab_size
from specs.plan import ParallelPlan

SAVED_PER_RECORDED_OP = 38 / 35
"""Tensors autograd saves per recorded forward operator: a checkpointed tiny (Llama) layer
of the executor packs 38 tensors for its 35 recorded operators (traced, torch 2.13)."""
SDPA_SAVED_TENSORS = 5
"""Tensors SDPA saves for its backward (query, key, value, output, log-sum-exp)."""
TOKEN_EXCHANGES = 2
"""Token exchanges of a MoE layer's pass under expert parallelism (there and back)."""
PIPELINE_ACTION_DISPATCHES = 3
"""Host dispatches the pipelining runtime adds per action besides its P2P posts
(forward_one_chunk's ``detach`` and ``requires_grad_`` of the received input; the output's
``detach`` for the send)."""


def _lane_group(
    profile: HardwareProfile, groups: CommGroups, lane: str, statistic: bool
) -> GroupPlacement:
    """The group a lane's collectives run over; the MoE statistic all-reduce (``statistic``)
    runs over the tp·cp ranks (`costmodel.topology.product_placement`)."""
    if lane == "tp":
        return groups.tp
    if lane == "cp":
        return groups.cp
    if lane == "ep" and not statistic:
        return groups.ep
    return product_placement(profile, (groups.tp, groups.cp), "tp-cp")


def _comm_pass(
    profile: HardwareProfile,
    rates: HostRates,
    comms,
    groups: CommGroups,
    *,
    host_s: float,
    backward: bool,
) -> dict[str, tuple[float, float]]:
    """Per lane (seconds, bytes) of a pass's collectives, each at its typical cost (the
    fit plus `HostRates.waited_excess_s`, as each follows a stretch of the layer's host
    work; `HostRates.functional_s` for a functional call or half of
    `HostRates.autograd_exchange_s` for an autograd all-to-all; and
    `HostRates.redistribute_s` for a ``tp`` one, a DTensor redistribution), times
    `HostOverheads.layer_collective_scale`. A MoE layer's exchanges are priced per
    layer in context when the profile probed them (`_exchange_in_context`, unscaled: the
    probe times them among a layer's host work), after ``host_s`` (the pass's host work)
    shared over its exchanging layers."""
    out = {"tp": (0.0, 0.0), "cp": (0.0, 0.0), "ep": (0.0, 0.0)}
    layers = sum(c.count for c in comms if c.exchange and c.autograd) / TOKEN_EXCHANGES
    in_context = rates.moe_exchange is not None and layers > 0
    for comm in comms:
        statistic = comm.lane == "ep" and comm.op == "all_reduce"
        group = _lane_group(profile, groups, comm.lane, statistic)
        if group.size < 2:
            continue
        one = collective_time_s(profile, comm.op, comm.size_bytes, group)
        if in_context and comm.exchange:
            seconds = _exchange_in_context(
                profile, rates, comm, group, one, host_s=host_s / layers, backward=backward
            )
        else:
            extra = rates.functional_s(comm.op) if comm.functional else 0.0
            if comm.autograd:
                extra = rates.autograd_exchange_s / 2
            if comm.lane == "tp":  # the executor's TP and SP collectives are DTensor's
                extra += rates.redistribute_s(comm.op)
            per_call_s = one + rates.waited_excess_s(comm.op, group.size) + extra
            seconds = comm.count * per_call_s * layer_collective_scale(profile)
        s, b = out[comm.lane]
        out[comm.lane] = (s + seconds, b + comm.count * comm.size_bytes)
    return out


def _exchange_in_context(
    profile: HardwareProfile,
    rates: HostRates,
    comm: Comm,
    group: GroupPlacement,
    one_s: float,
    *,
    host_s: float,
    backward: bool,
) -> float:
    """A MoE layer's exchanges of one pass from the profile's probe
    (`costmodel.runtimes.torch.moe_exchange_rates`): the token exchanges carry the layers' figure at
    ``host_s`` of host work per layer, plus the all-to-all fit's difference between their size (one
    call: ``one_s``) and the probe's; the count exchange is inside that figure."""
    assert rates.moe_exchange is not None
    if not comm.autograd:
        return 0.0
    probe = collective_time_s(profile, "all_to_all", PROBE_TOKEN_BYTES, group)
    wire = comm.count * (one_s - probe)
    per_layer = rates.moe_exchange.extra_s(backward=backward, host_s=host_s)
    return max(comm.count / TOKEN_EXCHANGES * per_layer + wire, 0.0)


def pass_cost(
    work: HostOps,
    comms,
    profile: HardwareProfile,
    rates: HostRates,
    groups: CommGroups,
    *,
    backward: bool,
) -> PassCost:
    """A `PassCost` from operators and collectives, all communication exposed."""
    compute_s = host_seconds(work, rates, backward=backward)
    lanes = _comm_pass(profile, rates, comms, groups, host_s=compute_s, backward=backward)
    return PassCost(
        compute_s=compute_s,
        tp_s=lanes["tp"][0],
        tp_exposed_s=lanes["tp"][0],
        tp_bytes=lanes["tp"][1],
        cp_s=lanes["cp"][0],
        cp_exposed_s=lanes["cp"][0],
        cp_bytes=lanes["cp"][1],
        ep_s=lanes["ep"][0],
        ep_exposed_s=lanes["ep"][0],
        ep_bytes=lanes["ep"][1],
    )


def microbatch_overhead(plan: ParallelPlan, *, first: bool, last: bool) -> ModuleOps:
    """Bookkeeping of one microbatch outside the chunks of a virtual stage (module doc);
    the ``backward()`` call is added by `module_costs`."""
    if plan.pp > 1:
        action = HostOps(views=PIPELINE_ACTION_DISPATCHES, p2p_posts=(not first) + (not last))
        return ModuleOps(forward=action, backward=action)
    return ModuleOps(forward=HostOps(ops=3, views=3), backward=HostOps(ops=1))


def module_costs(
    ops: ModuleOps,
    profile: HardwareProfile,
    rates: HostRates,
    groups: CommGroups,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) `PassCost` of a module's operators and collectives."""
    forward = pass_cost(ops.forward, ops.forward_comms, profile, rates, groups, backward=False)
    backward = pass_cost(ops.backward, ops.backward_comms, profile, rates, groups, backward=True)
    return forward, backward


def chunk_ops(
    model: ModelSpec,
    profile: HardwareProfile,
    rates: HostRates,
    plan: ParallelPlan,
    x: RankShape,
    layers: range,
    *,
    first: bool,
    last: bool,
    layer_kinds: dict[bool, ModuleOps] | None = None,
) -> tuple[ModuleOps, ModuleOps]:
    """(operators of the chunk's forward and backward, operators a recompute reruns).
    DTensor's operators cost their in-context price in each pass
    (`costmodel.runtimes.torch.dtensor_rates`); a recompute's rerun keeps their loop price.
    ``layer_kinds``: `layer_ops` by ``is_moe`` for this (model, profile, rates, plan, x),
    filled here where missing; a caller pricing several chunks of one plan passes one dict
    so that each layer kind is priced once (same arguments, same result)."""
    mask = model.moe_layer_mask()
    vocab = padded_vocab_size(model.vocab_size, plan.tp)
    kinds = {} if layer_kinds is None else layer_kinds
    for k in set(mask) - kinds.keys():
        kinds[k] = layer_ops(model, profile, rates, plan, x, is_moe=k)
    total = ModuleOps()
    for i in layers:
        total = total.plus(kinds[mask[i]])
    if first:
        total = total.plus(embedding_ops(model, x, vocab))
    if last:
        total = total.plus(head_ops(model, profile, x, vocab))
    total = total.plus(microbatch_overhead(plan, first=first, last=last))
    total = total.plus(
        ModuleOps(
            forward=HostOps(
                kernel_s=dtensor_context_s(rates, total.forward, backward=False, layers=len(layers))
            ),
            backward=HostOps(
                kernel_s=dtensor_context_s(rates, total.backward, backward=True, layers=len(layers))
            ),
        )
    )
    hooks = checkpoint_hooks_s(model, rates, plan, layers, kinds, backward=False)
    total = total.plus(ModuleOps(forward=HostOps(kernel_s=hooks)))
    return total, recompute_ops(model, profile, rates, plan, x, layers, kinds)


def _checkpointed_calls(
    model: ModelSpec, plan: ParallelPlan, layers: range, kinds: dict[bool, ModuleOps]
) -> list[tuple[list[ModuleOps], float]]:
    """Each checkpointed call of a chunk: (its layers' operators, tensors it saves): the
    attention core of every layer under selective recompute (`SDPA_SAVED_TENSORS`), groups
    of whole layers under full recompute (`SAVED_PER_RECORDED_OP` per recorded operator)."""
    mask = model.moe_layer_mask()
    if plan.recompute == "none":
        return []
    if plan.recompute == "selective":
        return [([kinds[mask[i]]], SDPA_SAVED_TENSORS) for i in layers]
    keys = list(layers)
    n = plan.recompute_num_layers or (1 if plan.recompute_method == "uniform" else len(keys))
    if plan.recompute_method == "uniform":
        groups = [keys[i : i + n] for i in range(0, len(keys), n)]
    else:
        groups = [[k] for k in keys[:n]]
    calls = []
    for group in groups:
        members = [kinds[mask[i]] for i in group]
        recorded = sum(
            m.forward.ops + m.forward.dt_ops + m.forward.dt_norms * DTENSOR_RMSNORM_FORWARD.dt_ops
            for m in members
        )
        calls.append((members, SAVED_PER_RECORDED_OP * recorded))
    return calls


def checkpoint_hooks_s(
    model: ModelSpec,
    rates: HostRates,
    plan: ParallelPlan,
    layers: range,
    kinds: dict[bool, ModuleOps],
    *,
    backward: bool,
) -> float:
    """The non-reentrant checkpoint's own cost in one pass of a chunk, its rerun apart: in
    context (`costmodel.runtimes.torch.checkpoint_rates`, per call after its layers' host work per
    layer of the pass) when the profile probed it; else all in the backward, at
    `HostRates.checkpoint_call_s` per call and `HostRates.checkpoint_tensor_s` per saved tensor."""
    calls = _checkpointed_calls(model, plan, layers, kinds)
    context = rates.checkpoint_context
    if context is None:
        if not backward:
            return 0.0
        return sum(
            rates.checkpoint_call_s + saved * rates.checkpoint_tensor_s for _, saved in calls
        )
    total = 0.0
    for members, saved in calls:
        host_s = sum(
            host_seconds(m.backward if backward else m.forward, rates, backward=backward)
            for m in members
        ) / len(members)
        total += context.hooks_s(backward=backward, host_s=host_s, saved=saved)
    return total


def recompute_ops(
    model: ModelSpec,
    profile: HardwareProfile,
    rates: HostRates,
    plan: ParallelPlan,
    x: RankShape,
    layers: range,
    kinds: dict[bool, ModuleOps],
) -> ModuleOps:
    """Forward work the backward reruns (`torch.utils.checkpoint`, non-reentrant): the
    attention core under selective recompute (`Attention.recompute_core`), whole layers
    under full recompute (`DecoderChunk.full_recompute_groups`), plus the checkpoint's
    backward hooks (`checkpoint_hooks_s`). Returned as a module whose *forward* is the
    rerun work."""
    if plan.recompute == "none":
        return ModuleOps()
    hooks = HostOps(kernel_s=checkpoint_hooks_s(model, rates, plan, layers, kinds, backward=True))
    if plan.recompute == "selective":
        core = attention_core(model, profile, rates, x)
        rerun = ModuleOps(forward=core.forward, forward_comms=core.forward_comms)
        return rerun.scaled(len(layers)).plus(ModuleOps(forward=hooks))
    total = ModuleOps(forward=hooks)
    for members, _ in _checkpointed_calls(model, plan, layers, kinds):
        for layer in members:
            total = total.plus(ModuleOps(forward=layer.forward, forward_comms=layer.forward_comms))
    return total


def executor_pass_costs(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    rates: HostRates,
    groups: CommGroups,
    stage: int,
    chunk: int,
    layer_kinds: dict[bool, ModuleOps] | None = None,
) -> tuple[PassCost, PassCost, PassCost]:
    """(forward, backward, recompute) of one chunk and microbatch on one rank; the
    backward includes the ``backward()`` call of its microbatch, and its compute is
    multiplied by the host section's ``backward_scale`` (a calibration's fit of the
    forward/backward split; the recompute, a forward, keeps the forward's price).
    ``layer_kinds``: a cache of `layer_ops` shared by the chunks of one plan (`chunk_ops`)."""
    m = plan.num_microbatches(job.global_batch_size)
    x = rank_shape(plan, job.seq_length, m)
    layers = chunk_layers(model, plan, stage, chunk)
    v = virtual_stage(stage, chunk, plan.pp)
    ops, redo = chunk_ops(
        model,
        profile,
        rates,
        plan,
        x,
        layers,
        first=v == 0,
        last=v == plan.pp * plan.vpp - 1,
        layer_kinds=layer_kinds,
    )
    forward, backward = module_costs(ops, profile, rates, groups)
    backward = backward.plus(PassCost(compute_s=rates.backward_call_s))
    backward = replace(backward, compute_s=backward.compute_s * backward_scale(profile))
    recompute = ZERO
    if plan.recompute != "none":
        recompute, _ = module_costs(redo, profile, rates, groups)
    return forward, backward, recompute


def scale_grads_s(rates: HostRates, tensors: int, params: float) -> float:
    """The pipelining schedule's division of every gradient by the microbatch count."""
    return tensors * rates.dispatch_s + 2 * params * FP32 / rates.bandwidth_Bps
