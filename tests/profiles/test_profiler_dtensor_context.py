"""A DTensor linear in context (`profiles.profiler.dtensor_context`)."""

from __future__ import annotations

import statistics

import torch

from costmodel.runtimes.torch import dtensor_rates as model
from profiles.profiler import dtensor_context as probe
from profiles.profiler import in_context
from tests.profiles.profiler_in_context import check_records
from tests.profiles.test_profiler_framework import RUN


def test_the_cost_model_reads_the_probe_records():
    assert (model.EXTRA, model.LAYER) == (probe.EXTRA, probe.LAYER)
    assert len(probe.LEVELS) == model.LEVELS


def test_without_a_process_group_nothing_is_timed():
    assert probe.time_dtensor_context(RUN) == ()


def test_the_dtensor_block_computes_the_plain_one_and_communicates_nothing(one_rank_group):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (1,))
    last = probe.DTensorLast(mesh, torch.device("cpu"))
    plain = in_context.WorkBlock(3, torch.device("cpu"))
    with_dtensor = in_context.WorkBlock(3, torch.device("cpu"), last)
    with_dtensor.load_state_dict(plain.state_dict())
    weight = last.weight.to_local().detach()
    plain.weights[2].data.copy_(weight.T)
    x = torch.randn(in_context.TOKENS, in_context.WIDTH, requires_grad=True)
    torch.testing.assert_close(with_dtensor(x), plain(x))
    with_dtensor(x).sum().backward()
    assert last.weight.grad is not None and x.grad is not None


def test_one_rank_records_the_pattern_against_the_plain_chain_at_two_levels(one_rank_group):
    found = {r.op: r.times_s for r in probe.time_dtensor_context(RUN)}
    check_records(found, probe.EXTRA, probe.LAYER, center=statistics.median)
