"""The screen on the executor model (`costmodel.runtimes.torch.screen` through
`costmodel.screen.screen_plans`): the simulator's figures on a CPU profile, impossible rows,
and memory priced before time."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from costmodel.estimate import estimate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_plans
from profiles.store import load_profile
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset
from specs.rules import check_plan
from tests.costmodel.torch_fixture import CPU, JOB, TINY, cluster


def test_screen_is_the_simulator_on_a_cpu_profile():
    plans = []
    for world, tp, pp, mbs, rec, opt in itertools.product(
        (2, 4), (1, 2), (1, 2), (1, 2), ("none", "full"), (False, True)
    ):
        plan = ParallelPlan.for_world(
            world, tp=tp, pp=pp, micro_batch_size=mbs, recompute=rec, distributed_optimizer=opt
        )
        if not check_plan(TINY, cluster(world), JOB, plan):
            plans.append((world, plan))
    assert len(plans) > 20
    for world in (2, 4):
        chosen = [p for w, p in plans if w == world]
        screened = screen_plans(
            TINY, cluster(world), JOB, CPU, plans_frame(chosen), options=TORCH_OPTIONS
        )
        for row, plan in zip(screened.itertuples(), chosen, strict=True):
            est = estimate_plan(TINY, cluster(world), JOB, plan, CPU, options=TORCH_OPTIONS)
            assert row.iteration_time_s == pytest.approx(est.iteration_time_s, rel=1e-12)
            assert row.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-12)


def test_screen_marks_impossible_rows():
    frame = pd.DataFrame({"pp": [2, 1], "micro_batch_size": [16, 1], "dp": [1, 2]})
    out = screen_plans(TINY, cluster(2), JOB, CPU, frame, options=TORCH_OPTIONS)
    assert np.isinf(out["iteration_time_s"][0]) and not out["fits"][0]
    assert np.isfinite(out["iteration_time_s"][1])


def test_screen_prices_memory_first_and_does_not_time_plans_over_memory():
    """A plan whose peak exceeds the device's memory keeps its priced peak and gets no
    time; a plan that fits is timed as `estimate_plan` times it."""
    h100 = load_profile("h100-sxm-80gb")
    llama = get_preset("llama3-8b")
    job = TrainingJob(seq_length=4096, global_batch_size=16, precision="bf16")
    over, fits = ParallelPlan(dp=8), ParallelPlan(tp=2, pp=2, dp=2)
    out = screen_plans(
        llama, cluster(8), job, h100, plans_frame([over, fits]), options=TORCH_OPTIONS
    )
    for row, plan in zip(out.itertuples(), (over, fits), strict=True):
        est = estimate_plan(llama, cluster(8), job, plan, h100, options=TORCH_OPTIONS)
        assert row.peak_memory_bytes == pytest.approx(est.peak_memory_bytes, rel=1e-12)
        assert row.fits == (est.peak_memory_bytes <= h100.device.memory_gib * 2**30)
        if row.fits:
            assert row.iteration_time_s == pytest.approx(est.iteration_time_s, rel=1e-12)
        else:
            assert np.isinf(row.iteration_time_s)
    assert not out["fits"][0] and out["fits"][1]
