"""Per-microbatch costs of the vocabulary-parallel layers on one rank: the word embedding
(`embedding_cost`) and the final norm, output layer and cross entropy (`logits_cost`),
each over the padded vocabulary split over TP, with their TP collectives.

A LoRA job freezes both (Megatron-Bridge ``PEFT.freeze_model``): the embedding's output
needs no gradient, so autograd never runs its backward; the output layer computes its
input gradient but no weight gradient (Megatron-core's ``linear_with_frozen_weight``,
``tensor_parallel/layers.py``).
"""

from __future__ import annotations

from costmodel import compute as ops
from costmodel.collectives import collective_time_s
from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS
from costmodel.passes import ZERO, CommGroups, PassCost
from costmodel.runtimes.megatron.layer_shape import gemm3, intra_groups, layer_shape
from profiles.schema import HardwareProfile
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.params import padded_vocab_size
from specs.plan import ParallelPlan


def embedding_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) of the vocab-parallel word embedding for one microbatch: the
    lookup, then an all-reduce (no SP) or reduce-scatter (SP) of its output over TP;
    backward sums the gradient into the token rows (after all-gathering it with SP), and
    builds the dense gradient of the rank's vocabulary slice and adds it into the main
    gradient (`costmodel.compute.embedding_weight_grad_time_s`, ``options.main_grad_bytes``);
    no backward for a LoRA job's frozen embedding (module docstring)."""
    comm = groups or intra_groups(plan)
    x = layer_shape(job, plan)
    h = model.hidden_size
    rows = padded_vocab_size(model.vocab_size, plan.tp) / plan.tp
    fwd = PassCost(compute_s=ops.embedding_time_s(profile, x.tokens, h, x.elem, "forward"))
    bwd_s = ops.embedding_time_s(profile, x.tokens, h, x.elem, "backward")
    bwd_s += ops.embedding_weight_grad_time_s(profile, rows, h, x.elem, options.main_grad_bytes)
    bwd = PassCost(compute_s=bwd_s)
    if x.tp > 1:
        size = x.tokens * h * x.elem
        op = "reduce_scatter" if x.sp else "all_reduce"
        t = collective_time_s(profile, op, size, comm.tp)
        fwd = fwd.plus(PassCost(tp_s=t, tp_exposed_s=t, tp_bytes=size))
        if x.sp:
            t = collective_time_s(profile, "all_gather", size, comm.tp)
            bwd = bwd.plus(PassCost(tp_s=t, tp_exposed_s=t, tp_bytes=size))
    return fwd, ZERO if job.lora is not None else bwd


def logits_cost(
    model: ModelSpec,
    job: TrainingJob,
    plan: ParallelPlan,
    profile: HardwareProfile,
    groups: CommGroups | None = None,
    options: ExecutionOptions = DEFAULT_OPTIONS,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) of the final norm, the vocab-parallel output layer and the
    cross entropy for one microbatch (padded vocabulary, split over TP).

    TP: with SP the norm output is all-gathered before the output GEMM and its gradient
    reduce-scattered; without SP the input gradient is all-reduced; the loss adds three
    small all-reduces of fp32 [tokens] (max, target logit, sum of exponentials). A LoRA
    job's frozen output layer runs no weight-gradient GEMM (module docstring).
    """
    comm = groups or intra_groups(plan)
    x = layer_shape(job, plan)
    h = model.hidden_size
    vocab = padded_vocab_size(model.vocab_size, plan.tp) / x.tp
    gemm = gemm3(profile, x, x.tokens, vocab, h)
    fwd_s = ops.norm_time_s(profile, x.norm_tokens, h, x.elem, "forward") + gemm[0]
    fwd_s += ops.cross_entropy_time_s(profile, x.tokens, vocab, x.elem, "forward")
    bwd_s = ops.norm_time_s(
        profile,
        x.norm_tokens,
        h,
        x.elem,
        "backward",
        two_pass_backward=options.two_pass_norm_backward,
    )
    bwd_s += gemm[1] + (0.0 if job.lora is not None else gemm[2])
    bwd_s += ops.cross_entropy_time_s(profile, x.tokens, vocab, x.elem, "backward")
    fwd, bwd = PassCost(compute_s=fwd_s), PassCost(compute_s=bwd_s)
    if x.tp > 1:
        size = x.tokens * h * x.elem
        loss = 3 * collective_time_s(profile, "all_reduce", 4 * x.tokens, comm.tp)
        first = collective_time_s(profile, "all_gather", size, comm.tp) if x.sp else 0.0
        grad_op = "reduce_scatter" if x.sp else "all_reduce"
        second = collective_time_s(profile, grad_op, size, comm.tp)
        fwd_bytes = (size if x.sp else 0.0) + 12 * x.tokens
        fwd = fwd.plus(PassCost(tp_s=first + loss, tp_exposed_s=first + loss, tp_bytes=fwd_bytes))
        bwd = bwd.plus(PassCost(tp_s=second, tp_exposed_s=second, tp_bytes=size))
    return fwd, bwd
