"""The scale bookkeeping of Transformer Engine's per-tensor FP8 recipes that is
communication rather than memory traffic: the amax all-reduce of per-tensor current
scaling over the tensor-parallel group.

Per-tensor current scaling (Megatron-core ``--fp8-recipe tensorwise``, TE
``Float8CurrentScaling``) scales each GEMM operand by the amax of the operand itself. With
sequence parallelism a rank quantizes only its T/tp token rows of an operand that the
layer then all-gathers in FP8 (the column-parallel input in forward, the row-parallel
output gradient in backward), so every rank of the TP group must use the same scale: TE
sets the TP group as the quantizer's ``amax_reduction_group`` (`module/layernorm_linear.py`
and `module/linear.py`, ``set_quantizer_amax_reduction_group`` with ``tp_group if
(sequence_parallel and parallel_mode == "column")`` for the input, ``"row"`` for the output
gradient in ``_linear_backward``), and ``Float8CurrentScalingQuantizer::quantize_impl``
(`pytorch/csrc/quantizer.cpp`) all-reduces the one-element fp32 amax (``ReduceOp::MAX``)
between the amax kernel and the scale kernel, waiting for it (``->wait()``) before the
cast. The compute stream waits for a latency-bound collective, once per linear pair and
direction. Without sequence parallelism every TP rank holds the whole operand: no
reduction. Delayed scaling and MXFP8 reduce nothing per operand.

The memory passes of each recipe's quantization: `costmodel.fp8_quantization.fp8_quantize_time_s`.
"""

from __future__ import annotations

from costmodel.collectives import collective_time_s
from costmodel.memory_allowances import Fp8Recipe
from costmodel.passes import ZERO, PassCost
from costmodel.topology import GroupPlacement
from profiles.schema import HardwareProfile

AMAX_BYTES = 4
"""Bytes of the amax one current-scaling quantizer all-reduces: one fp32 element."""


def amax_reduction_pair(
    profile: HardwareProfile,
    *,
    recipe: Fp8Recipe,
    sequence_parallel: bool,
    tp_group: GroupPlacement,
    row_parallel: bool,
) -> tuple[PassCost, PassCost]:
    """(forward, backward) TP amax all-reduces of one column-parallel / row-parallel linear
    pair of an FP8 layer (module docstring), all exposed.

    Forward: one, for the column-parallel input (``LayerNormLinear``'s norm output, or the
    MLA down projection's input). Backward: one, for the row-parallel output gradient,
    when the pair has a row-parallel GEMM of its own (``row_parallel``). Zero unless
    ``recipe`` is ``tensorwise`` and ``sequence_parallel`` holds over a TP group of 2 or
    more ranks. Each is an ``all_reduce`` of `AMAX_BYTES` (`costmodel.collectives`)."""
    if recipe != "tensorwise" or not sequence_parallel or tp_group.size < 2:
        return ZERO, ZERO
    one = collective_time_s(profile, "all_reduce", AMAX_BYTES, tp_group)
    forward = PassCost(tp_s=one, tp_exposed_s=one, tp_bytes=AMAX_BYTES)
    return forward, forward if row_parallel else ZERO
