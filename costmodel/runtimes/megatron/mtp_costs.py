"""Per-microbatch cost on one rank of a multi-token-prediction depth's work outside its
layers and its output layer: the embedding of the shifted tokens, the two input norms,
their concatenation and the ``eh_proj`` projection with its tensor-parallel collectives
(`mtp_depth_cost`). The depth's layers are priced as the decoder's
(`costmodel.runtimes.megatron.layer_costs`), its final norm, output layer and loss as the
main model's (`costmodel.runtimes.megatron.vocab_costs.logits_cost`).

Megatron-core's `MultiTokenPredictionLayer` (``megatron/core/transformer/
multi_token_prediction.py``), per depth and microbatch:

- ``_get_embeddings``: the input ids rolled by one token go through the model's word
  embedding again (`costmodel.runtimes.megatron.vocab_costs.embedding_cost`: the lookup and
  its TP all-reduce, or reduce-scatter with sequence parallelism).
- ``_concat_embeddings``: ``enorm`` on the embedding and ``hnorm`` on the hidden states
  (one norm each over the rank's T' rows of h: T' = T/tp with sequence parallelism, T
  without), ``torch.cat`` of the two along the hidden dimension (a copy: reads 2·T'·h and
  writes 2·T'·h elements), then ``eh_proj``, a Transformer Engine column-parallel linear
  2h -> h (``gather_output=False``, no bias): with sequence parallelism it all-gathers its
  [T/tp, 2h] input and its backward reduce-scatters the input gradient; without, its
  backward all-reduces the input gradient. Its output, [T, h/tp], is gathered along the
  hidden dimension (``gather_from_tensor_model_parallel_region``: an all-gather of [T, h]
  and the copy that puts the pieces side by side; its backward splits the gradient, a
  contiguous copy of [T, h/tp]) and, with sequence parallelism, split back along the
  sequence (``scatter_to_sequence_parallel_region``: a view forward, an all-gather of
  [T, h] backward). The gradient of ``torch.cat`` is a pair of views; no copy is priced.
- ``eh_proj`` is built with ``tp_comm_buffer_name="mtp_eh_proj"``, a name Megatron's
  ``TELinear`` does not hand to userbuffers (only ``qkv``, ``proj``, ``fc1``, ``fc2``), so
  its collectives are not overlapped under `tp_comm_overlap`; its input-gradient
  reduction overlaps its weight-gradient GEMM under `ExecutionOptions.tp_dgrad_overlap`
  as a column-parallel linear's does (`costmodel.runtimes.megatron.linear_pairs.tp_pair`).
- Precision: under ``fp8`` the projection runs in the fp8 context
  (``_proj_and_transformer_layer``): its input and output gradient are quantized
  (`costmodel.fp8_quantization.fp8_quantize_time_s`); an ``nvfp4`` job's MTP depth runs in
  bf16 (no fp4 context in ``_proj_and_transformer_layer``), so the projection is priced as
  a bf16 GEMM.
- Full recompute with the ``uniform`` method checkpoints ``_proj_and_transformer_layer``
  (``_checkpointed_forward``): the norms, the concatenation and the projection run again
  in the backward; the embedding, computed before it, does not. The ``block`` method runs
  it without a checkpoint, nothing of the depth rerun
  (`specs.plan.ParallelPlan.checkpoints_mtp_depths`, read by
  `costmodel.runtimes.megatron.pricing` and the screen).
- A LoRA job freezes ``eh_proj`` and the embedding: no weight-gradient GEMM, no embedding
  backward.

The GEMM is the 2h x h term of Megatron-LM's ``transformer_flops`` MTP count
(`costmodel.flops.mtp_forward_flops_per_token`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.compute import LOW_PRECISION_GEMM_DTYPES
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.fp8_quantization import fp8_quantize_time_s, operand_recipe
from costmodel.passes import CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import LayerShape, gemm3, intra_groups, layer_shape
from costmodel.runtimes.megatron.vocab_costs import embedding_cost
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class MtpDepthCost:
    """One MTP depth's work outside its layers and output layer, one microbatch, one rank."""

    forward: PassCost
    """Embedding, norms, concatenation, ``eh_proj`` and its collectives."""
    backward: PassCost
    """Their backward."""
    projection_forward: PassCost
    """Of ``forward``, what the depth's checkpoint runs again in the backward: the norms,
    the concatenation and ``eh_proj`` with its collectives, not the embedding."""


def mtp_depth_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> MtpDepthCost:
    """The cost of one MTP depth outside its layers and output layer (module docstring)."""
    comm = groups or intra_groups(plan)
    x = layer_shape(job, plan)
    if x.dtype == "fp4":  # no fp4 context around the MTP depth
        x = dataclasses.replace(x, dtype="bf16")
    frozen = job.lora is not None
    emb_fwd, emb_bwd = embedding_cost(model, job, plan, profile, comm, options)
    proj_fwd, proj_bwd = _projection(model, profile, x, comm, options, frozen=frozen)
    return MtpDepthCost(
        forward=emb_fwd.plus(proj_fwd),
        backward=emb_bwd.plus(proj_bwd),
        projection_forward=proj_fwd,
    )


def _projection(
    model: ModelSpec,
    profile: HardwareProfile,
    x: LayerShape,
    comm: CommGroups,
    options: ExecutionOptions,
    *,
    frozen: bool,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) of ``enorm``, ``hnorm``, the concatenation and ``eh_proj`` with
    its collectives (module docstring)."""
    h, rows, e = model.hidden_size, x.norm_tokens, x.elem
    two_pass = options.two_pass_norm_backward
    gemm = gemm3(profile, x, x.tokens, h / x.tp, 2 * h)
    wgrad = 0.0 if frozen else gemm[2]
    fwd_s = 2 * ops.norm_time_s(profile, rows, h, e, "forward")
    fwd_s += ops.memory_bound_time_s(profile, 4 * e * rows * h)  # torch.cat
    fwd_s += gemm[0]
    bwd_s = 2 * ops.norm_time_s(profile, rows, h, e, "backward", two_pass_backward=two_pass)
    bwd_s += gemm[1] + wgrad
    if x.dtype in LOW_PRECISION_GEMM_DTYPES:
        recipe = operand_recipe(x.dtype, options.fp8_recipe)
        copies = 1 if frozen else 2
        fwd_s += fp8_quantize_time_s(profile, rows * 2 * h, e, recipe=recipe, copies=copies)
        bwd_s += fp8_quantize_time_s(profile, x.tokens * h / x.tp, e, recipe=recipe)
    fwd, bwd = PassCost(compute_s=fwd_s), PassCost(compute_s=bwd_s)
    if x.tp < 2:
        return fwd, bwd
    out_bytes = x.tokens * h * e  # [T, h]
    gather = collective_time_s(profile, "all_gather", out_bytes, comm.tp)
    fwd_comm, fwd_bytes = gather, out_bytes  # the output gathered along h
    fwd = fwd.plus(PassCost(compute_s=ops.memory_bound_time_s(profile, 2 * out_bytes)))
    split_s = ops.memory_bound_time_s(profile, 2 * out_bytes / x.tp)
    bwd = bwd.plus(PassCost(compute_s=split_s))
    in_bytes = 2 * out_bytes  # [T, 2h]
    grad_op = "reduce_scatter" if x.sp else "all_reduce"
    grad_s = collective_time_s(profile, grad_op, in_bytes, comm.tp)
    grad_exposed = max(0.0, grad_s - wgrad) if options.tp_dgrad_overlap else grad_s
    bwd_comm, bwd_exposed, bwd_bytes = grad_s, grad_exposed, in_bytes
    if x.sp:
        in_gather = collective_time_s(profile, "all_gather", in_bytes, comm.tp)
        fwd_comm, fwd_bytes = fwd_comm + in_gather, fwd_bytes + in_bytes
        bwd_comm, bwd_exposed = bwd_comm + gather, bwd_exposed + gather
        bwd_bytes += out_bytes
    fwd = fwd.plus(PassCost(tp_s=fwd_comm, tp_exposed_s=fwd_comm, tp_bytes=fwd_bytes))
    bwd = bwd.plus(PassCost(tp_s=bwd_comm, tp_exposed_s=bwd_exposed, tp_bytes=bwd_bytes))
    return fwd, bwd
