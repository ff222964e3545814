"""Activation checkpointing in context (`profiles.profiler.checkpoint_context`)."""

from __future__ import annotations

import statistics

import torch

from costmodel.runtimes.torch import checkpoint_rates as model
from profiles.profiler import checkpoint_context as probe
from profiles.profiler import in_context
from tests.profiles.test_profiler_framework import RUN


def test_the_cost_model_reads_the_probe_at_its_levels_and_counts():
    assert model.PROBE_WORK == probe.LEVELS
    assert model.SAVED_PER_PRODUCT == probe.SAVED_PER_PRODUCT


def _saved_per_call(chain: torch.nn.Module, x: torch.Tensor) -> list[int]:
    """Tensors packed by each checkpointed call of ``chain``'s forward."""
    counts: list[int] = []
    pack = torch.autograd.graph.saved_tensors_hooks

    def counting(t: torch.Tensor) -> torch.Tensor:
        counts[-1] += 1
        return t

    original = torch.utils.checkpoint.checkpoint

    def traced(fn, *args, **kwargs):
        counts.append(0)
        with pack(counting, lambda t: t):
            return fn(*args)

    torch.utils.checkpoint.checkpoint = traced
    try:
        chain(x)
    finally:
        torch.utils.checkpoint.checkpoint = original
    return counts


def test_the_variants_save_the_tensors_the_model_assumes():
    x = torch.randn(probe.TOKENS, probe.WIDTH, requires_grad=True)
    for work in probe.LEVELS:
        full = _saved_per_call(probe._Chain(work, "full", torch.device("cpu")), x)
        part = _saved_per_call(probe._Chain(work, "part", torch.device("cpu")), x)
        assert full == [work * probe.SAVED_PER_PRODUCT] * in_context.CHAIN_LAYERS
        assert part == [probe.SAVED_PER_PRODUCT] * in_context.CHAIN_LAYERS
        assert _saved_per_call(probe._Chain(work, "plain", torch.device("cpu")), x) == []


def test_one_rank_times_both_variants_against_the_plain_chain_at_two_levels():
    found = {r.op: r.times_s for r in probe.time_checkpoint_context(RUN)}
    kinds = ("ckpt_full", "ckpt_part", "ckpt_layer")
    assert set(found) == {
        f"{k}_{p}_w{level}" for k in kinds for p in in_context.PASSES for level in (0, 1)
    }
    # (rounds the hypervisor stole CPU time in are left out, from every record alike)
    assert all(
        1 <= len(v) <= in_context.PAIRS // in_context.PAIRS_PER_SAMPLE for v in found.values()
    )
    for p in in_context.PASSES:
        idle, worked = found[f"ckpt_layer_{p}_w0"], found[f"ckpt_layer_{p}_w1"]
        assert all(0 < t < 0.5 for t in idle + worked)
        assert statistics.median(worked) > 2 * statistics.median(idle)  # robust to preemption
    for level in (0, 1):
        forward = sum(found[f"ckpt_layer_forward_w{level}"])
        # the whole block's rerun is in its backward, one product's in the part's
        assert sum(found[f"ckpt_full_backward_w{level}"]) > 0.5 * forward
        assert sum(found[f"ckpt_full_backward_w{level}"]) > sum(
            found[f"ckpt_part_backward_w{level}"]
        )
