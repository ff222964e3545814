"""What one rank sees of one transformer layer for one microbatch (`LayerShape`), and
the pieces every block of the layer shares: the three timings of a GEMM (`gemm3`), the
pre-norm and residual of a block (`norm_and_residual`; the parallel attention+MLP block's
norms, branch dropouts and residual add: `block_elementwise_s`), and the default
placement of the TP / CP / EP groups (`intra_groups`).

Shapes (Megatron-LM, megatron-facts.md §6-§7): a microbatch of b sequences of length s
gives T = b·s/cp tokens on a rank. Column-parallel GEMMs (QKV, FC1) produce 1/tp of the
output columns, row-parallel GEMMs (output projection, FC2) consume 1/tp of the input
columns. Norms and residual adds run on T/tp tokens with sequence parallelism, T without.
Every GEMM runs three times (forward, dgrad, wgrad: `costmodel.flops`), each timed with its
own shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from costmodel import compute as ops
from costmodel.execution import ExecutionOptions
from costmodel.passes import CommGroups
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile
from specs.block_checks import block_norms, is_parallel_block
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerShape:
    """What one rank sees for one microbatch."""

    tokens: float
    """Token rows on the rank, T = b·s/cp."""
    norm_tokens: float
    """Token rows of the norms and residual adds: T/tp with sequence parallelism, else T."""
    seq: int
    """Sequence length s."""
    span: int
    """Tokens of one causal attention span: the packed document length under sequence
    packing, else s (`specs.job.TrainingJob.attention_span_tokens`)."""
    micro_batch: int
    """Sequences per microbatch, b."""
    cp: int
    """Context-parallel degree."""
    tp: int
    """Tensor-parallel degree."""
    sp: bool
    """Sequence parallelism in effect (the plan asks for it and tp > 1)."""
    elem: int
    """Bytes per activation element (`costmodel.compute.element_bytes`)."""
    dtype: str
    """GEMM dtype (`costmodel.compute.gemm_dtype`)."""
    precision: str
    """The job's precision."""


def layer_shape(job: TrainingJob, plan: ParallelPlan) -> LayerShape:
    tokens = plan.micro_batch_size * job.seq_length / plan.cp
    sp = plan.sequence_parallel and plan.tp > 1
    return LayerShape(
        tokens=tokens,
        norm_tokens=tokens / plan.tp if sp else tokens,
        seq=job.seq_length,
        span=job.attention_span_tokens,
        micro_batch=plan.micro_batch_size,
        cp=plan.cp,
        tp=plan.tp,
        sp=sp,
        elem=ops.element_bytes(job.precision),
        dtype=ops.gemm_dtype(job.precision),
        precision=job.precision,
    )


def _rows(value: float) -> int:
    return max(math.ceil(value), 1)


def gemm3(
    profile: HardwareProfile, x: LayerShape, m: float, n: float, k: float
) -> tuple[float, ...]:
    """(forward, dgrad, wgrad) seconds of an (m x k) @ (k x n) GEMM and its gradients."""
    mi, ni, ki = _rows(m), _rows(n), _rows(k)
    return (
        ops.gemm_time_s(profile, mi, ni, ki, x.dtype),
        ops.gemm_time_s(profile, mi, ki, ni, x.dtype),
        ops.gemm_time_s(profile, ki, ni, mi, x.dtype),
    )


def norm_and_residual(
    profile: HardwareProfile, x: LayerShape, h: int, options: ExecutionOptions
) -> tuple[float, float]:
    """One pre-norm and one residual (bias-dropout-add) of a block: (forward, backward)
    seconds, with the framework's norm backward and dropout (`costmodel.execution`)."""
    two_pass, dropout = options.two_pass_norm_backward, options.hidden_dropout
    fwd = ops.norm_time_s(profile, x.norm_tokens, h, x.elem, "forward")
    fwd += ops.residual_time_s(profile, x.norm_tokens, h, x.elem, "forward", dropout=dropout)
    bwd = ops.norm_time_s(profile, x.norm_tokens, h, x.elem, "backward", two_pass_backward=two_pass)
    bwd += ops.residual_time_s(profile, x.norm_tokens, h, x.elem, "backward", dropout=dropout)
    return fwd, bwd


BlockPart = Literal["attention", "mlp"]
"""The half of a transformer layer whose element-wise work `block_elementwise_s` gives."""


def block_elementwise_s(
    profile: HardwareProfile,
    x: LayerShape,
    model: ModelSpec,
    options: ExecutionOptions,
    part: BlockPart,
) -> tuple[float, float]:
    """(forward, backward) seconds of the norms, dropouts and residual adds of one ``part``
    of a dense transformer layer, by ``ModelSpec.layer_block``.

    Sequential block: each part's pre-norm and bias-dropout-add (`norm_and_residual`).

    Parallel block (GPT-NeoX ``ParallelTransformerLayer.forward`` under
    ``gpt_j_residual``, EleutherAI/gpt-neox ``megatron/model/transformer.py``): the
    norms read the layer input on the norm tokens (T/tp with sequence parallelism); the
    branches' outputs are the row-parallel GEMMs' unreduced partial sums, T tokens on
    every rank whatever sequence parallelism does. Forward, ``attention``: the pre-norm,
    then the attention branch's bias-dropout without a residual (``bias_dropout_fn(...,
    residual=None)``: read and write 2·e, plus the 1-byte mask with dropout; none when the
    model has no linear bias and the run no dropout). Forward, ``mlp``: the second
    pre-norm (``parallel`` only; ``parallel_shared_norm`` feeds one norm output to both
    branches), the MLP branch's bias-dropout-add onto the attention branch
    (``residual=attention_output``, `costmodel.compute.residual_time_s`) and, after the
    block's one reduction, the residual add ``residual + self.reduce(output)`` on the norm
    tokens. Backward, each part: its norm's backward, one sum of the gradients reaching
    the layer input (read 2·e, write e on the norm tokens: the residual's and the norms'
    under ``parallel``; the two branches' before the shared norm and the residual's after
    it under ``parallel_shared_norm``) and, with dropout, its branch's mask pass (read the
    gradient and the mask, write the gradient, on T tokens)."""
    h = model.hidden_size
    if not is_parallel_block(model.layer_block):
        return norm_and_residual(profile, x, h, options)
    dropout, elem = options.hidden_dropout, x.elem
    mask_pass = ops.memory_bound_time_s(profile, (2 * elem + ops.MASK_BYTES) * x.tokens * h)
    branch_b = mask_pass if dropout else 0.0
    grad_sum = ops.residual_time_s(profile, x.norm_tokens, h, elem, "backward")
    norms = 1 if part == "attention" else block_norms(model.layer_block) - 1
    norm_f = norms * ops.norm_time_s(profile, x.norm_tokens, h, elem, "forward")
    norm_b = norms * ops.norm_time_s(
        profile,
        x.norm_tokens,
        h,
        elem,
        "backward",
        two_pass_backward=options.two_pass_norm_backward,
    )
    if part == "attention":
        branch_f = 0.0
        if dropout:
            branch_f = mask_pass
        elif model.add_bias_linear:
            branch_f = ops.memory_bound_time_s(profile, 2 * elem * x.tokens * h)
        return norm_f + branch_f, norm_b + grad_sum + branch_b
    fwd = norm_f + ops.residual_time_s(profile, x.tokens, h, elem, "forward", dropout=dropout)
    fwd += ops.residual_time_s(profile, x.norm_tokens, h, elem, "forward")
    return fwd, norm_b + grad_sum + branch_b


def intra_groups(plan: ParallelPlan) -> CommGroups:
    def intra(axes: str, size: int) -> GroupPlacement:
        return GroupPlacement(
            axes=axes,
            size=size,
            num_nodes=1,
            num_domains=1,
            ranks_per_node=size,
            ranks_per_domain=size,
            nics_per_node=0,
        )

    return CommGroups(
        tp=intra("tp", plan.tp),
        cp=intra("cp", plan.cp),
        ep=intra("ep", plan.ep),
        etp=intra("etp", plan.expert_tp),
    )
