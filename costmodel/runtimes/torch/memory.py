"""Peak memory of one rank of the executor on a CPU (`executor/`, fp32 throughout).

Parts, per rank of a stage (`costmodel.memory.StageMemory`, bytes):
- weights: the rank's fp32 parameters (`costmodel.runtimes.torch.sync.stage_layout`); FSDP2 keeps
  1/n of them (n = dp·cp for dense, expert dp for experts) and gathers one module at a
  time, counted in ``comm_buffers`` (pp > 1 keeps a chunk's modules gathered through its
  microbatch: all of them);
- gradients: fp32, created by the first microbatch's backward and kept until
  ``zero_grad`` (``set_to_none`` after every step); FSDP2 accumulates unsharded gradients
  over the microbatches and keeps the reduced shard. A step of a single microbatch without
  pipelining never holds them with its activations: the backward creates them layer by
  layer as it frees the activations, so the peak is the larger of the activations (no
  gradients yet) and the gradients (no activations left; dp2 at micro-batch 4 on the tiny
  model: 31.8 MiB measured, 34.8 MiB when both were counted);
- optimizer: AdamW's m and v (two fp32 copies of the local shard), created at the first step;
- activations: the tensors autograd saves for one microbatch, times the microbatches the
  stage holds at its peak (1 without pipelining, `costmodel.activations.in_flight_chunk_counts`
  with it). Per layer (T tokens, Tn residual tokens, widths Q, KV, F as in
  `costmodel.runtimes.torch.ops`): each RMSNorm its input, normalized input and output (3·Tn·D;
  LayerNorm 1·Tn·D plus two per-row statistics) and, under SP, the gathered T·D input of
  the linears; the rotated queries and keys, the values, SDPA's output and the reshaped
  copy (3·T·Q + 2·T·KV; with CP the gathered keys and values, cp times larger); SwiGLU's
  w1, silu, w3 and product outputs (4·T·F; GELU 2·T·F). Selective recompute drops SDPA's
  output (T·Q) but rebuilds it for the top layer while the others still hold theirs, so
  the peak keeps it (``recompute_working``); full recompute keeps one layer input per
  checkpointed group and rebuilds one group at a time in backward. MoE layers keep the router's
  logits and probabilities, the dispatched rows and each expert's four intermediate
  tensors over its rows, the combined rows, and the shared expert like a dense MLP;
- output activations (last stage): the log-softmax output T·V is saved; the backward
  starts with the T·V gradient of the logits and of the log-softmax, and under TP the
  gathered logits, so the peak adds 2·T·V;
- comm_buffers: DDP's bucket buffers (as large as the gradients, allocated when DDP wraps
  the model), FSDP2's gathered modules, the pipeline's receive buffers, and under the
  interleaved schedule every tensor it has sent: torch's ``ScheduleInterleaved1F1B`` waits
  for its sends only when the step ends, so each sent output and input gradient lives on
  until then, and the peak comes later in the step the more microbatches it runs
  (`interleaved_runtime_peak`; pp2 vpp2 on the tiny model, rank 0: 11.6, 12.4 and 14.2 MiB
  measured at 4, 8 and 16 microbatches, against 11.3 MiB for each without the sends);
- framework: 0. The interpreter, torch's libraries and gloo's buffers are process memory,
  not tensors; the executor measures tensors (`executor.run`), so they are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from costmodel.activations import in_flight_chunk_counts
from costmodel.memory import StageMemory
from costmodel.runtimes.torch.ops import FP32
from costmodel.runtimes.torch.sync import stage_layout
from costmodel.schedules import chunk_layers, warmup_microbatches_interleaved
from specs.data_parallel import fsdp2_reshard_after_forward
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import padded_vocab_size
from specs.plan import ParallelPlan


def _norm_saved(model: ModelSpec, rows: float) -> float:
    d = model.hidden_size
    return (3 * rows * d) if model.normalization == "rmsnorm" else (rows * d + 2 * rows)


def layer_activation_elements(
    model: ModelSpec, plan: ParallelPlan, seq: int, is_moe: bool
) -> float:
    """Elements autograd saves for one layer and one microbatch (module doc)."""
    t = plan.micro_batch_size * seq / plan.cp
    sp = plan.sequence_parallel and plan.tp > 1
    tn = t / plan.tp if sp else t
    d = model.hidden_size
    q = model.num_attention_heads * model.head_dim / plan.tp
    kv = max(model.query_groups // plan.tp, 1) * model.head_dim
    gathered = t * d if sp else 0.0
    attention = _norm_saved(model, tn) + gathered + 3 * t * q + 2 * plan.cp * t * kv
    if plan.recompute == "selective":
        attention -= t * q
    gated = model.activation == "swiglu"
    if not is_moe:
        ffn = 4 if gated else 2
        return (
            attention
            + _norm_saved(model, tn)
            + gathered
            + ffn * t * model.ffn_hidden_size / plan.tp
        )
    rows = model.moe_top_k * tn * min(model.moe_capacity_factor or 1.0, 1.0)
    e, f = model.num_experts, model.expert_ffn_hidden_size
    routed = 3 * tn * e + rows * d * 2 + rows * (4 if gated else 2) * f
    shared = (4 if gated else 2) * t * model.moe_shared_expert_size / plan.tp
    return attention + _norm_saved(model, tn) + routed + shared + (gathered if shared else 0.0)


def _stage_layers(model: ModelSpec, plan: ParallelPlan, stage: int, chunk: int) -> range:
    return chunk_layers(model, plan, stage, chunk)


def _checkpointed(plan: ParallelPlan, layers: range) -> int:
    keys = list(layers)
    if plan.recompute != "full":
        return 0
    n = plan.recompute_num_layers or (1 if plan.recompute_method == "uniform" else len(keys))
    return len(keys) if plan.recompute_method == "uniform" else min(n, len(keys))


def _chunk_activations(
    model: ModelSpec, plan: ParallelPlan, seq: int, layers: range
) -> tuple[float, float]:
    """(saved elements of one microbatch of a chunk, recompute working set)."""
    mask = model.moe_layer_mask()
    per = {k: layer_activation_elements(model, plan, seq, k) for k in set(mask)}
    t = plan.micro_batch_size * seq / plan.cp
    tn = t / plan.tp if plan.sequence_parallel and plan.tp > 1 else t
    redone = _checkpointed(plan, layers)
    keys = list(layers)
    if redone == 0:
        # Selective recompute drops SDPA's output, but the backward rebuilds it for the top
        # layer while every layer below still holds its activations.
        q = model.num_attention_heads * model.head_dim / plan.tp
        working = t * q if plan.recompute == "selective" else 0.0
        return sum(per[mask[i]] for i in keys), working
    if plan.recompute_method == "uniform":
        group = plan.recompute_num_layers or 1
        inputs = -(-len(keys) // group) * tn * model.hidden_size
        working = group * max(per.values())
        return inputs, working
    kept = sum(per[mask[i]] for i in keys[redone:])
    return kept + redone * tn * model.hidden_size, max(per.values())


def interleaved_runtime_peak(
    pp: int, vpp: int, stage: int, m: int, chunk_elements: Sequence[float], send_elements: float
) -> tuple[tuple[int, ...], int]:
    """(microbatches held per chunk, sends held) at the peak of one rank of torch's
    ``ScheduleInterleaved1F1B``, which waits for its sends only when the step ends, so each
    sent tensor lives on until then (module doc).

    The rank runs ``warmup`` forwards (`warmup_microbatches_interleaved`: torch's rounds of
    pp microbatches equal Megatron's groups), then forward-backward pairs, then the
    remaining backwards; the k-th forward runs chunk ``(k // pp) % vpp``, the j-th backward
    chunk ``vpp - 1 - (j // pp) % vpp``. Every forward of a virtual stage but the last
    sends its output, every backward of a virtual stage but the first its input gradient.
    The peak is the largest held total after a forward: ``chunk_elements[c]`` per
    microbatch of chunk c, ``send_elements`` per held send."""
    warmup = warmup_microbatches_interleaved(pp, vpp, stage, m)
    order = [("F", k) for k in range(warmup)]
    for j in range(m * vpp - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", j) for j in range(m * vpp - warmup, m * vpp)]
    held, sends = [0] * vpp, 0
    best: tuple[float, tuple[int, ...], int] = (-1.0, tuple(held), 0)
    for kind, k in order:
        if kind == "F":
            chunk = (k // pp) % vpp
            held[chunk] += 1
            sends += not (chunk == vpp - 1 and stage == pp - 1)
            total = sum(h * e for h, e in zip(held, chunk_elements, strict=True))
            if total + sends * send_elements > best[0]:  # the first of equal peaks
                best = (total + sends * send_elements, tuple(held), sends)
        else:
            chunk = vpp - 1 - (k // pp) % vpp
            held[chunk] -= 1
            sends += not (chunk == 0 and stage == 0)
    return best[1], best[2]


def _comm_buffers(model: ModelSpec, plan: ParallelPlan, stage: int) -> float:
    params = stage_layout(model, plan, stage)
    buffers = 0.0
    reshard = fsdp2_reshard_after_forward(plan)
    if reshard is not None and plan.world_size > 1:
        # gathered weights: one module at a time when resharded after forward, else all
        buffers += max(params.blocks, default=0.0) if reshard else sum(params.blocks)
        buffers += 0.0 if reshard else params.expert
    elif plan.world_size > 1 and plan.tp == 1 and plan.dp * plan.cp > 1:
        buffers += params.dense  # DDP buckets
    return buffers * FP32


def _held(
    model: ModelSpec, plan: ParallelPlan, seq: int, stage: int, m: int, boundary: float
) -> tuple[tuple[int, ...], float, float, float]:
    """(microbatches held per chunk, their saved elements, the recompute working set, the
    elements of sends held) at the stage's peak: `in_flight_chunk_counts` for 1F1B, whose
    sends are waited for as the schedule goes; `interleaved_runtime_peak` for vpp > 1."""
    chunks = [
        _chunk_activations(model, plan, seq, _stage_layers(model, plan, stage, c))
        for c in range(plan.vpp)
    ]
    sends = 0
    if plan.vpp > 1:
        counts, sends = interleaved_runtime_peak(
            plan.pp, plan.vpp, stage, m, [e for e, _ in chunks], boundary
        )
    else:
        counts = in_flight_chunk_counts(plan.pp, plan.vpp, stage, m)
    saved = sum(held * e for held, (e, _) in zip(counts, chunks, strict=True))
    return counts, saved, max(w for _, w in chunks), sends * boundary


def executor_memory_per_stage(
    model: ModelSpec, job: TrainingJob, plan: ParallelPlan
) -> tuple[StageMemory, ...]:
    """`StageMemory` of one rank of every stage of the executor (module doc)."""
    job = replace(job, precision="fp32")
    m = max(plan.num_microbatches(job.global_batch_size), 1)
    vocab = padded_vocab_size(model.vocab_size, plan.tp)
    t = plan.micro_batch_size * job.seq_length / plan.cp
    boundary = t * model.hidden_size / (plan.tp if plan.sequence_parallel and plan.tp > 1 else 1)
    out = []
    for stage in range(plan.pp):
        params = stage_layout(model, plan, stage)
        sharded = fsdp2_reshard_after_forward(plan) is not None
        n_dense = plan.dp * plan.cp if sharded else 1
        n_expert = max(plan.world_size // (plan.ep * plan.pp), 1) if sharded else 1
        shard = params.dense / n_dense + params.expert / n_expert
        counts, saved, working, sent = _held(model, plan, job.seq_length, stage, m, boundary)
        last = stage == plan.pp - 1
        gradients = params.dense + params.expert
        if sharded:
            gradients += shard
        receive = 2 * boundary if plan.pp > 1 else 0.0
        output = (counts[-1] + 2) * t * vocab if last else 0.0
        if m == 1 and plan.pp == 1 and not sharded:
            if gradients >= saved + working + output:
                saved = working = output = 0.0
            else:
                gradients = 0.0
        out.append(
            StageMemory(
                pp_rank=stage,
                num_layers=sum(len(_stage_layers(model, plan, stage, c)) for c in range(plan.vpp)),
                in_flight_microbatches=sum(counts),
                weights_bytes=shard * FP32,
                gradients_bytes=gradients * FP32,
                optimizer_bytes=2 * shard * FP32,
                activations_bytes=saved * FP32,
                recompute_working_bytes=working * FP32,
                embedding_activations_bytes=0.0,
                output_activations_bytes=output * FP32,
                comm_buffers_bytes=_comm_buffers(model, plan, stage) + (receive + sent) * FP32,
                framework_bytes=0.0,
            )
        )
    return tuple(out)
