"""FlashAttention-2 attention rates on Hopper, derived from the FlashAttention-3 curves the
H100-class profiles store.

`ExecutionOptions.flash_attention_version` 2 prices stacks from before FlashAttention-3:
`costmodel.execution_presets.framework_profile` scales an FA3 profile's attention curves by
the FA2/FA3 throughput ratio of the FA3 paper (`FA2_OVER_FA3_H100`, `fa2_attention_curves`).
"""

from __future__ import annotations

import dataclasses
import math

from profiles.schema_device import AttentionCurve, AttentionPoint

FA2_OVER_FA3_H100: dict[str, tuple[tuple[int, float], ...]] = {
    "forward": ((512, 191.0 / 292.0), (16384, 335.0 / 616.0)),
    "backward": ((512, 214.0 / 316.0), (16384, 322.0 / 561.0)),
}
"""FlashAttention-2 over FlashAttention-3 throughput on an H100 SXM5, per pass, at the two
ends of the FA3 paper's sequence sweep (Shah et al. 2024, arXiv 2407.08608, bar charts for
bf16/fp16, head dim 128, causal mask, batch x sequence = 16k tokens; hardware.md §2b):
forward FA2 191 -> 335 TFLOP/s against FA3 292 -> 616, backward 214 -> 322 against
316 -> 561, for sequence 512 -> 16k. `flash_attention_rate` interpolates the ratio linearly in
log2(sequence) between the ends and holds it outside."""

FA3_CURVE_PREFIX = "FlashAttention-3"
"""`ComputeProfile.attention_kernel` prefix of profiles whose attention curves are FA3's
(H100, H200, and MI300X scaled from them; the Blackwell profiles carry measured cuDNN
curves, `profiles.derive_cudnn`, which FA2 scaling leaves alone)."""


def flash_attention_rate(direction: str, seq_len: int) -> float:
    """FA2 throughput over FA3's on Hopper at ``seq_len`` for a ``direction`` pass
    (`FA2_OVER_FA3_H100`): linear in log2(seq_len) between the measured ends, held outside."""
    (s0, r0), (s1, r1) = FA2_OVER_FA3_H100[direction]
    if seq_len <= s0:
        return r0
    if seq_len >= s1:
        return r1
    t = (math.log2(seq_len) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
    return r0 + (r1 - r0) * t


def fa2_attention_curves(curves: tuple[AttentionCurve, ...]) -> tuple[AttentionCurve, ...]:
    """FA3 attention curves at FlashAttention-2's rate: every point's TFLOP/s times
    `flash_attention_rate` of its pass and sequence length."""
    return tuple(
        dataclasses.replace(
            curve,
            points=tuple(
                AttentionPoint(
                    seq_len=p.seq_len,
                    tflops=p.tflops * flash_attention_rate(curve.direction, p.seq_len),
                )
                for p in curve.points
            ),
        )
        for curve in curves
    )
