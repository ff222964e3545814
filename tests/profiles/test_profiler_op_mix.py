"""The operator-mix probe (`profiles.profiler.op_mix`)."""

from __future__ import annotations

from tests.profiles.test_profiler_framework import RUN


def test_the_op_mix_chain_is_timed_per_pass_with_the_executors_operators():
    import torch

    from costmodel.runtimes.torch import op_mix_rates as mix_model
    from executor.model import apply_rope as executor_rope
    from profiles.profiler import op_mix
    from profiles.profiler.routing import ROUNDS_PER_SAMPLE

    assert (mix_model.MIX_BLOCKS, mix_model.MIX_TOKENS, mix_model.MIX_WIDTH) == (
        op_mix.MIX_BLOCKS,
        op_mix.MIX_TOKENS,
        op_mix.MIX_WIDTH,
    )
    x, cos, sin = torch.randn(1, 8, 2, 4), torch.randn(8, 4), torch.randn(8, 4)
    assert torch.equal(op_mix.apply_rope(x, cos, sin), executor_rope(x, cos, sin))
    records = {r.op: r.times_s for r in op_mix.time_op_mix(RUN)}
    assert set(records) == {"op_mix_forward", "op_mix_backward"}
    for samples in records.values():
        assert len(samples) == op_mix.MIX_ROUNDS // ROUNDS_PER_SAMPLE
        assert all(0 < t < 0.5 for t in samples)
