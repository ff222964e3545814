"""Per-microbatch seconds of a gated shared expert's gate on one rank
(`shared_expert_gate_s`).

Megatron-core ``megatron/core/transformer/moe/shared_experts.py`` (d98e8a64,
`SharedExpertMLP.forward` with ``moe_shared_expert_gate``): the gate is an h -> 1 weight
(``gate_weight``, replicated), and the shared expert's output is scaled per token,
``output * sigmoid(linear(hidden_states, gate_weight))``, on the MoE layer's input rows,
the rank's sequence shard under sequence parallelism. Each operator is a separate
eager kernel over T tokens of h channels with ``e``-byte elements, all memory-bound
(`costmodel.compute.memory_bound_time_s`): the GEMV reads its input once per output
element, one FLOP pair per byte read, far below any GPU's ridge point.

- Forward, 3 kernels: the GEMV reads x and writes the logits (e·T·(h + 1)); the sigmoid
  reads and writes them (2·e·T); the product reads the output and the gate and writes the
  gated output (e·T·(2·h + 1)).
- Input gradients, 5 kernels: the product's two gradients (the output's: read the
  gradient and the gate, write, e·T·(2·h + 1); the gate's, a row sum of gradient times
  output, e·T·(2·h + 1)); the sigmoid's (3·e·T); the GEMV's input gradient, the logit
  gradient times the weight (e·T·(h + 1)), added into the layer input's gradient
  (3·e·T·h).
- Weight gradient, 1 kernel: the logit gradient against x (e·T·(h + 1)).
"""

from __future__ import annotations

from costmodel import compute as ops
from profiles.schema import HardwareProfile


def shared_expert_gate_s(
    profile: HardwareProfile, tokens: float, hidden: int, elem: int
) -> tuple[float, float, float]:
    """(forward, input-gradient, weight-gradient) seconds of the shared-expert gate on
    ``tokens`` rows of ``hidden`` channels with ``elem``-byte elements (module
    docstring)."""
    row = elem * tokens
    forward = ops.memory_bound_time_s(profile, row * (3 * hidden + 4), num_ops=3)
    dgrad = ops.memory_bound_time_s(profile, row * (8 * hidden + 6), num_ops=5)
    wgrad = ops.memory_bound_time_s(profile, row * (hidden + 1))
    return forward, dgrad, wgrad
