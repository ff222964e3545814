"""Activation memory per rank of a pipeline stage: the microbatches in flight, full-recompute
checkpoints, per-module recompute and CPU offloading, the embedding and the loss. The bytes
each layer keeps are counted in `costmodel.layer_activations`.

- Per-module selective recompute (`ParallelPlan.recompute_modules`) drops the saved tensors
  of the named modules and CPU activation offloading moves the tensors it offloads to host
  memory (`costmodel.activation_savers`). Layer-level offloading leaves (L - N) layers'
  activations on the device, as Transformer Engine's default schedule guarantees
  (``get_cpu_offload_context`` docstring, `transformer_engine/pytorch/cpu_offload.py`);
  fine-grained offloading keeps one layer's offloaded inputs on the device (Megatron-core
  leaves the last offload group of a step on the device to avoid a reload stall:
  `docs/user-guide/features/fine_grained_activation_offloading.md`).
- Full recompute keeps only each checkpoint's input (2·s·b·h, /t with SP) and rebuilds one
  checkpoint at a time in the backward pass; that rebuilt group is the recompute working
  set, counted once per stage. Selective recompute likewise rebuilds one layer's core
  attention at a time.
- Multi-token-prediction depths (`ModelSpec.mtp_depth_kinds`: a transformer's one layer of
  its last layer's kind, a hybrid model's block) keep their layers' activations and what
  each depth keeps outside them (`costmodel.mtp_activations.mtp_depth_tensors`: its
  embedding, norms, ``eh_proj`` input, output layer and loss) per in-flight microbatch of
  the chunk that holds them, every depth its own (repeated weights compute, and save, once
  per depth); under full recompute each depth is one checkpoint (Megatron-core
  ``MultiTokenPredictionLayer._checkpointed_forward`` wraps the projection, the layers and
  the final norm), as the screen counts them.
- The loss keeps per in-flight microbatch what its cross-entropy implementation saves of
  the logits: an fp32 softmax (Megatron-core's own implementations) or the logits
  themselves with the gradient written into them (Transformer Engine up to v2.17);
  `costmodel.vocab_activations.logits_element_bytes`.

Units: bytes per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.activation_savers import offloaded_bytes, recomputed_bytes
from costmodel.activation_shard import ActivationShard, activation_shard
from costmodel.bf16_layers import bf16_layer_job
from costmodel.layer_activations import AttentionKernel, LayerActivations, shard_layer_activations
from costmodel.mtp_activations import MTP_CHECKPOINT_TENSORS, mtp_depth_tensors
from costmodel.schedules import (
    chunk_layers,
    plan_split,
    warmup_microbatches_1f1b,
    warmup_microbatches_interleaved,
)
from costmodel.vocab_activations import (
    CrossEntropyFusion,
    embedding_microbatch_bytes,
    output_microbatch_bytes,
)
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan

# ---- recompute ---------------------------------------------------------------------------


def checkpoint_groups(plan: ParallelPlan, layers: range) -> tuple[tuple[int, ...], ...]:
    """Full-recompute checkpoints of one model chunk, each a run of consecutive layers.

    Megatron-LM `--recompute-method`: ``uniform`` checkpoints every group of N =
    recompute_num_layers consecutive layers (all layers are recomputed); ``block``
    checkpoints each of the first N layers of the chunk on its own and keeps the rest.
    recompute_num_layers None means N = 1 for uniform and every layer for block, i.e. each
    layer its own checkpoint. Empty unless ``plan.recompute == "full"``.
    """
    if plan.recompute != "full":
        return ()
    n = plan.recompute_num_layers
    if plan.recompute_method == "block":
        count = len(layers) if n is None else min(n, len(layers))
        return tuple((layer,) for layer in layers[:count])
    size = n or 1
    return tuple(tuple(layers[i : i + size]) for i in range(0, len(layers), size))


def recomputed_layers(model: ModelSpec, plan: ParallelPlan) -> frozenset[int]:
    """Layers whose whole forward runs twice under full recompute (empty otherwise)."""
    chosen: set[int] = set()
    for stage in range(plan.pp):
        for chunk in range(plan.vpp):
            layers = chunk_layers(model, plan, stage, chunk)
            for group in checkpoint_groups(plan, layers):
                chosen.update(group)
    return frozenset(chosen)


# ---- pipeline: microbatches in flight ----------------------------------------------------


def in_flight_chunk_counts(
    pp: int, vpp: int, pp_rank: int, num_microbatches: int
) -> tuple[int, ...]:
    """Per model chunk, the microbatches whose activations stage ``pp_rank`` holds at its peak.

    1F1B: stage r holds min(pp - r, m) microbatches (Megatron warmup min(pp - r - 1, m),
    plus the one in its first steady forward). Interleaved: warmup
    2·(pp - r - 1) + (vpp - 1)·pp forwards plus one, at most m·vpp; forward k runs chunk
    (k // pp) % vpp (Megatron's schedule table, group size pp), so the peak set is the first
    that-many forwards (megatron-facts.md §3.2, §3.3).
    """
    if num_microbatches < 1:
        raise SpecError(
            f"num_microbatches must be >= 1, got {num_microbatches}; raise global_batch_size "
            "to at least micro_batch_size·dp"
        )
    if vpp == 1:
        return (min(warmup_microbatches_1f1b(pp, pp_rank, num_microbatches) + 1, num_microbatches),)
    warmup = warmup_microbatches_interleaved(pp, vpp, pp_rank, num_microbatches)
    held = min(warmup + 1, num_microbatches * vpp)
    counts = [0] * vpp
    for k in range(held):
        counts[(k // pp) % vpp] += 1
    return tuple(counts)


# ---- one pipeline stage --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class StageActivations:
    """Activation bytes one rank of a pipeline stage holds at its peak."""

    in_flight_microbatches: int
    """Microbatch-chunks held at the peak (all chunks together)."""
    layers_bytes: float
    """Stored layer activations, summed over the in-flight microbatch-chunks."""
    recompute_working_bytes: float
    """What the backward rebuilds at once: one checkpoint (full) or one layer's core
    attention (selective); 0 without recompute."""
    embedding_bytes: float
    """First stage: token ids and the embedding dropout mask of each in-flight microbatch."""
    output_bytes: float
    """Last stage: final-norm and output-layer inputs and what the loss keeps of the logits
    for the in-flight microbatches of the last chunk, plus the loss's transient logits bytes
    of one microbatch (`costmodel.vocab_activations.output_microbatch_bytes`)."""
    offloaded_bytes: float = 0.0
    """Layer activations held in host memory at the peak (CPU activation offloading); not
    part of layers_bytes, which under fine-grained offloading keeps one offloaded layer in
    flight on the device."""
    mtp_bytes: float = 0.0
    """Of ``layers_bytes``, the MTP depths': their layers' and what each keeps outside them
    (module docstring)."""


def _chunk_bytes(
    per_layer: dict[int, LayerActivations], plan: ParallelPlan, layers: range
) -> tuple[float, float]:
    """(stored bytes per microbatch, recompute working bytes) of one chunk."""
    if plan.recompute == "none":
        return sum(per_layer[i].full_bytes for i in layers), 0.0
    if plan.recompute == "selective":
        modules = plan.selective_modules
        freed = {i: recomputed_bytes(per_layer[i].tensors, modules) for i in layers}
        stored = sum(per_layer[i].full_bytes - freed[i] for i in layers)
        return stored, max(freed.values(), default=0.0)
    groups = checkpoint_groups(plan, layers)
    checkpointed = {i for group in groups for i in group}
    stored = sum(per_layer[group[0]].input_bytes for group in groups)
    stored += sum(per_layer[i].full_bytes for i in layers if i not in checkpointed)
    working = max(
        (sum(per_layer[i].full_bytes for i in g) - per_layer[g[0]].input_bytes for g in groups),
        default=0.0,
    )
    return stored, working


def _mtp_stage_bytes(
    model: ModelSpec,
    job: TrainingJob,
    x: ActivationShard,
    plan: ParallelPlan,
    pp_rank: int,
    counts: tuple[int, ...],
    attention: AttentionKernel,
    dropout: bool,
    cross_entropy: CrossEntropyFusion,
) -> tuple[float, float]:
    """(stored bytes, recompute working bytes) of the MTP depths on one rank of stage
    ``pp_rank``, ``counts`` in-flight microbatches per chunk (module docstring); zeros
    without MTP."""
    if not model.mtp_num_layers:
        return 0.0, 0.0
    kinds = model.mtp_depth_kinds()
    depth = [shard_layer_activations(model, x, plan, kind, attention) for kind in kinds]
    outside = mtp_depth_tensors(model, job, plan, dropout=dropout, cross_entropy=cross_entropy)
    stored, working = _mtp_depth_bytes(depth, outside, plan)
    split = plan_split(model, plan)
    total = held = 0.0
    for chunk, count in enumerate(counts):
        depths = split.chunk(pp_rank, chunk).mtp_layers
        total += count * depths * stored
        held = max(held, working if count and depths else 0.0)
    return total, held


def _mtp_depth_bytes(
    depth: list[LayerActivations], outside: dict[str, float], plan: ParallelPlan
) -> tuple[float, float]:
    """(stored bytes per microbatch, recompute working bytes) of one MTP depth: its layers
    as a chunk's layers plus the tensors it keeps outside them (``outside``,
    `costmodel.mtp_activations.mtp_depth_tensors`); where Megatron-core checkpoints the
    depth (`specs.plan.ParallelPlan.checkpoints_mtp_depths`) one checkpoint that keeps
    `costmodel.mtp_activations.MTP_CHECKPOINT_TENSORS` and rebuilds the rest; under full
    ``block`` recompute every tensor, as without recompute (module docstring)."""
    if plan.recompute == "full" and not plan.checkpoints_mtp_depths:
        return sum(layer.full_bytes for layer in depth) + sum(outside.values()), 0.0
    if plan.recompute != "full":
        stored, working = _chunk_bytes(dict(enumerate(depth)), plan, range(len(depth)))
        return stored + sum(outside.values()), working
    kept = sum(outside[name] for name in MTP_CHECKPOINT_TENSORS)
    rebuilt = sum(outside.values()) - kept + sum(layer.full_bytes for layer in depth)
    return kept, rebuilt


def stage_activations(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    pp_rank: int,
    *,
    attention: AttentionKernel = "flash",
    dropout: bool = True,
    keep_outputs: bool = False,
    cross_entropy: CrossEntropyFusion = "unfused",
    proj_saves_input: bool = False,
    fp8_attention_recipe: str | None = None,
    bf16_layers: frozenset[int] = frozenset(),
    expert_fc1_saves_input: bool = False,
) -> StageActivations:
    """Peak activation bytes of one rank of pipeline stage ``pp_rank``; ``dropout``: the run
    applies hidden dropout (its masks are kept); ``keep_outputs``: every chunk but the
    model's last keeps the output it sent, [s/cp, b, h] (/tp with SP), for each in-flight
    microbatch (`costmodel.execution.ExecutionOptions.deallocate_pipeline_outputs` off),
    counted with the layer activations; ``cross_entropy``: the loss's implementation
    (`costmodel.vocab_activations.output_microbatch_bytes`, the MTP depths' losses
    included); ``proj_saves_input``: the attention output projection keeps no FP8 copy of
    its input (`projection_saves_original_input`); ``fp8_attention_recipe``:
    the FP8 recipe when attention runs in FP8 (`activation_shard`), else None;
    ``bf16_layers``: global indices of the decoder layers an fp8 or nvfp4 job keeps in bf16
    (`costmodel.bf16_layers.bf16_layers`), whose saved tensors are a bf16 job's
    (`costmodel.bf16_layers.bf16_layer_job`, without FP8 attention);
    ``expert_fc1_saves_input``: `costmodel.saved_inputs.expert_fc1_saves_input` of the run."""
    m = plan.num_microbatches(job.global_batch_size)
    counts = in_flight_chunk_counts(plan.pp, plan.vpp, pp_rank, m)
    x = activation_shard(
        job, plan, dropout, proj_saves_input, fp8_attention_recipe, expert_fc1_saves_input
    )
    per_layer = layer_activations_by_index(
        model, job, plan, x, attention, dropout, proj_saves_input, bf16_layers
    )
    mtp_bytes, working = _mtp_stage_bytes(
        model, job, x, plan, pp_rank, counts, attention, dropout, cross_entropy
    )
    layers_bytes, offloaded, working = _resident_layer_bytes(
        model, plan, pp_rank, counts, per_layer, (mtp_bytes, working)
    )
    first, last = pp_rank == 0, pp_rank == plan.pp - 1
    kept, transient = output_microbatch_bytes(model, job, plan, cross_entropy)
    if keep_outputs and plan.pp > 1:
        sending = sum(counts) - (counts[-1] if last else 0)
        layers_bytes += sending * x.element_bytes * x.tokens * model.hidden_size / x.sp
    return StageActivations(
        in_flight_microbatches=sum(counts),
        layers_bytes=layers_bytes,
        recompute_working_bytes=working,
        embedding_bytes=(
            counts[0] * embedding_microbatch_bytes(model, job, plan, dropout) if first else 0.0
        ),
        output_bytes=counts[-1] * kept + transient if last and counts[-1] else 0.0,
        offloaded_bytes=offloaded,
        mtp_bytes=mtp_bytes,
    )


def layer_activations_by_index(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    x: ActivationShard,
    attention: AttentionKernel,
    dropout: bool,
    proj_saves_input: bool,
    bf16_layers: frozenset[int],
) -> dict[int, LayerActivations]:
    """Global layer index -> what that layer saves on one rank
    (`costmodel.layer_activations.shard_layer_activations` of its kind on the shard ``x``),
    each of ``bf16_layers`` on a bf16 job's shard (`costmodel.bf16_layers.bf16_layer_job`,
    without FP8 attention); arguments as `stage_activations`."""
    kinds = model.layer_kinds()
    by_kind = {
        kind: shard_layer_activations(model, x, plan, kind, attention) for kind in set(kinds)
    }
    per_layer = {i: by_kind[kind] for i, kind in enumerate(kinds)}
    if bf16_layers:
        x16 = activation_shard(bf16_layer_job(job), plan, dropout, proj_saves_input, None)
        in_bf16 = {kinds[i] for i in bf16_layers}
        by_kind16 = {k: shard_layer_activations(model, x16, plan, k, attention) for k in in_bf16}
        per_layer.update({i: by_kind16[kinds[i]] for i in bf16_layers})
    return per_layer


def _resident_layer_bytes(
    model: ModelSpec,
    plan: ParallelPlan,
    pp_rank: int,
    counts: tuple[int, ...],
    per_layer: dict[int, LayerActivations],
    start: tuple[float, float],
) -> tuple[float, float, float]:
    """(layer bytes left on the device, bytes offloaded to host memory, recompute working
    bytes) of stage ``pp_rank``: each chunk's stored layer bytes (`_chunk_bytes`) times its
    in-flight microbatches ``counts``, less what CPU offloading moves
    (`_offloaded_layer_bytes`; fine-grained offloading keeps one layer's offloaded inputs in
    flight on the device), and the largest working set of a chunk. ``start``: the MTP
    depths' (stored bytes, working bytes) of the stage (`_mtp_stage_bytes`), added first."""
    layers_bytes, working = start
    offloaded, in_flight = 0.0, 0.0
    for chunk, count in enumerate(counts):
        layers = chunk_layers(model, plan, pp_rank, chunk)
        stored, chunk_working = _chunk_bytes(per_layer, plan, layers)
        moved = [_offloaded_layer_bytes(per_layer[i], plan, i) for i in layers]
        layers_bytes += count * stored
        offloaded += count * sum(moved)
        if count and plan.offload_modules:
            in_flight = max(in_flight, max(moved, default=0.0))
        working = max(working, chunk_working)
    # the offloaded activations leave the device (fine-grained: but one layer's, in flight)
    layers_bytes += in_flight - offloaded
    return layers_bytes, max(offloaded - in_flight, 0.0), working


def _offloaded_layer_bytes(layer: LayerActivations, plan: ParallelPlan, index: int) -> float:
    """Bytes of one stored layer that CPU activation offloading moves to host memory:
    every saved tensor of the first ``cpu_offloading_num_layers`` layers (Transformer
    Engine's ``get_cpu_offload_context`` offloads layers in forward order and keeps the
    last ones, whose backward comes first), or the inputs of ``offload_modules`` not
    already recomputed (`costmodel.activation_savers`)."""
    if plan.cpu_offloading_num_layers:
        return layer.full_bytes if index < plan.cpu_offloading_num_layers else 0.0
    if not plan.offload_modules:
        return 0.0
    return offloaded_bytes(layer.tensors, plan.offload_modules, plan.selective_modules)
