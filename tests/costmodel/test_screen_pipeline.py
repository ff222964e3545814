"""The screen's pipeline phase in closed form (`costmodel.runtimes.megatron.screen_pipeline`)
against Narayanan et al. 2021 §2.2 for uniform stages."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.runtimes.megatron.screen_pipeline import pipeline_s

M = np.array([4, 8, 16, 64])


def _uniform(pp: int, vpp: int, forward_s: float, backward_s: float):
    """Per-plan columns and stage times of ``len(M)`` plans whose stages all take
    ``forward_s`` and ``backward_s`` per microbatch."""
    n = len(M)
    c = {"pp": np.full(n, pp), "vpp": np.full(n, vpp)}
    pair = (np.full(n, forward_s), np.full(n, backward_s))
    return c, (pair, pair, pair)


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
@pytest.mark.parametrize("vpp", [1, 2, 4])
def test_uniform_stages_have_narayanans_bubble(pp, vpp):
    # Without communication, bubble / ideal = (p - 1)/m for 1F1B and (p - 1)/(v·m) for
    # interleaved schedules (§2.2.1, §2.2.2).
    forward_s, backward_s = 1.0, 2.0
    c, times = _uniform(pp, vpp, forward_s, backward_s)
    got = pipeline_s(c, times, np.zeros(len(M)), M, overlap_p2p=True)
    ideal = M * (forward_s + backward_s)
    np.testing.assert_allclose(got / ideal - 1, (pp - 1) / (vpp * M), rtol=1e-12)


@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("vpp", [2, 4])
def test_asynchronous_interleaved_sends_add_one_forward_and_one_backward_path(pp, vpp):
    # With overlapped sends, the first microbatch's forward through all p·v virtual stages
    # and the last one's backward each wait for p·v - 1 sends.
    send = 0.25
    c, times = _uniform(pp, vpp, 1.0, 2.0)
    free = pipeline_s(c, times, np.zeros(len(M)), M, overlap_p2p=True)
    sent = pipeline_s(c, times, np.full(len(M), send), M, overlap_p2p=True)
    np.testing.assert_allclose(sent - free, 2 * (pp * vpp - 1) * send, rtol=1e-12)


def test_blocking_sends_lengthen_every_microbatch_of_the_slowest_stage():
    # 1F1B sends block the sender: a middle stage sends forward and backward, 2 sends per
    # microbatch, and sets every steady-state step.
    pp, send = 4, 0.25
    c, times = _uniform(pp, 1, 1.0, 2.0)
    free = pipeline_s(c, times, np.zeros(len(M)), M, overlap_p2p=True)
    sent = pipeline_s(c, times, np.full(len(M), send), M, overlap_p2p=True)
    # (m - 1) steps of the middle stage, then stages 0 and p-1 (one send each) and the
    # p - 2 middle stages (two each)
    extra = (M - 1) * 2 * send + 2 * send + (pp - 2) * 2 * send
    np.testing.assert_allclose(sent - free, extra, rtol=1e-12)


def test_a_single_stage_runs_its_microbatches_back_to_back():
    c, times = _uniform(1, 1, 1.0, 2.0)
    got = pipeline_s(c, times, np.full(len(M), 5.0), M, overlap_p2p=False)
    np.testing.assert_allclose(got, M * 3.0, rtol=1e-12)
