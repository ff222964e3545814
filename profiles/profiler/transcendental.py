"""Transcendental element-wise kernels of one CPU rank, per element.

The executor's activation (``F.silu`` in SwiGLU), its loss (``F.cross_entropy``, whose
``log_softmax`` reads the whole vocabulary) and their backward kernels evaluate an
exponential per element. The torch runtime prices element-wise kernels per byte from the
executor's RMSNorm (`profiles.profiler.compute.cold_rmsnorm`); these kernels are timed on
their own so that the runtime can charge what they cost beyond that price
(`costmodel.runtimes.torch.transcendental_rates`). Kernels
(`profiles.schema_host.TRANSCENDENTAL_OPS`), over fp32 rows of
`profiles.profiler.compute.NORM_WIDTH`:

- ``silu``: ``F.silu(x)`` (reads x, writes y);
- ``silu_backward``: ``aten.silu_backward(dy, x)``, the kernel of autograd's SiluBackward0
  node (reads dy and x, writes dx);
- ``log_softmax``: ``torch.log_softmax(x, -1)`` (reads x twice, writes y);
- ``log_softmax_backward``: ``aten._log_softmax_backward_data(dy, y, -1)``, the kernel of
  LogSoftmaxBackward0 (reads dy and y, writes dx).

Each call reads the next of `profiles.profiler.compute.operand_sets` input sets and its
output is held for as many calls, as `cold_rmsnorm` does: in a training step every input
was written operators earlier and every output is a fresh activation. Sizes
(`TRANSCENDENTAL_ELEMENTS`) span the executor's activations of the small models, from
128 KiB to 2 MiB of fp32 output.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable

import torch
import torch.nn.functional as F

from profiles.profiler.compute import NORM_WIDTH, TORCH_DTYPES, Runner, operand_sets
from profiles.profiler.timing import TranscendentalTiming
from profiles.schema_host import TRANSCENDENTAL_OPS

TRANSCENDENTAL_ELEMENTS: tuple[int, ...] = (2**15, 2**17, 2**19)
"""Output elements of the probe's points (module doc)."""

Kernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""A kernel of (x, dy): the forward kernels read x only."""

KERNELS: dict[str, Kernel] = {
    "silu": lambda x, dy: F.silu(x),
    "silu_backward": lambda x, dy: torch.ops.aten.silu_backward(dy, x),
    "log_softmax": lambda x, dy: torch.log_softmax(x, dim=-1),
    "log_softmax_backward": lambda x, dy: torch.ops.aten._log_softmax_backward_data(
        dy, x, -1, x.dtype
    ),
}
"""The kernels of `profiles.schema_host.TRANSCENDENTAL_OPS` (module doc); for the backward of
``log_softmax`` the cold x stands for the forward's output y (the kernel reads values, not
their provenance)."""


def cold_transcendental(run: Runner, op: str, elements: int) -> Callable[[], torch.Tensor]:
    """One call of kernel ``op`` over ``elements`` fp32 elements, each call on the next
    cold input set with its output held (module doc)."""
    kernel = KERNELS[op]
    itemsize = TORCH_DTYPES["fp32"].itemsize
    sets = operand_sets(run, 2 * elements * itemsize)
    inputs = [
        tuple(run.randn(elements).view(-1, NORM_WIDTH) for _ in range(2)) for _ in range(sets)
    ]
    held: deque[torch.Tensor] = deque(maxlen=sets)
    turn = itertools.count()

    def call() -> torch.Tensor:
        x, dy = inputs[next(turn) % sets]
        out = kernel(x, dy)
        held.append(out)
        return out

    return call


def time_transcendental(run: Runner, elements: int) -> tuple[TranscendentalTiming, ...]:
    """Every kernel of `profiles.schema_host.TRANSCENDENTAL_OPS` over ``elements`` elements,
    in that order."""
    return tuple(
        TranscendentalTiming(
            op=op, elements=elements, times_s=run.time(cold_transcendental(run, op, elements))
        )
        for op in TRANSCENDENTAL_OPS
    )
