"""The screen's time bound (`costmodel.screen.screen_lower_bounds`) and its choice of the
middle stage it prices (`costmodel.runtimes.megatron.screen`)."""

from __future__ import annotations

import numpy as np

import costmodel.runtimes.megatron.screen as megatron_screen
from costmodel.estimate import estimate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from costmodel.plan_frame import plans_frame
from costmodel.screen import screen_lower_bounds, screen_plans
from planner.candidates import enumerate_candidates
from planner.space import SearchSpace
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

H100 = load_profile("h100-sxm-80gb")


def _candidate_rows(name: str, gpus: int, seq: int, batch: int):
    model = get_preset(name)
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=gpus)
    job = TrainingJob(seq_length=seq, global_batch_size=batch)
    table = enumerate_candidates(model, cluster, job, SearchSpace(), 8).table
    for column in ("recompute_num_layers", "ddp_bucket_size"):
        table[column] = table[column].where(table[column] > 0)
    for column in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        table[column] = table[column].where(table[column] > 0)
    return model, cluster, job, table


def test_bound_is_below_every_screened_time():
    """Every candidate's bound is at most its screened iteration time, whatever its
    recompute, optimizer sharding, overlap flags and bucket size."""
    for name, gpus, seq, batch in (("tiny-moe", 8, 512, 32), ("mixtral-8x7b", 32, 4096, 64)):
        model, cluster, job, rows = _candidate_rows(name, gpus, seq, batch)
        rows = rows.sample(n=min(len(rows), 6000), random_state=0)
        screened = screen_plans(model, cluster, job, H100, rows)
        bound = screen_lower_bounds(model, cluster, job, H100, rows)
        finite = np.isfinite(screened["iteration_time_s"].to_numpy())
        assert finite.any()
        assert np.all(bound[finite] <= screened["iteration_time_s"].to_numpy()[finite] * (1 + 1e-9))
        assert np.all(bound > 0)


def test_bound_is_tight_without_recompute_and_overlap_costs():
    """Without recompute the bound is the screened pipeline phase itself."""
    model, cluster, job, rows = _candidate_rows("tiny-moe", 8, 512, 32)
    rows = rows[rows["recompute"] == "none"].head(500)
    screened = screen_plans(model, cluster, job, H100, rows)
    bound = screen_lower_bounds(model, cluster, job, H100, rows)
    ok = np.isfinite(screened["pipeline_s"].to_numpy())
    np.testing.assert_allclose(bound[ok], screened["pipeline_s"].to_numpy()[ok], rtol=1e-9)


def test_no_bound_for_the_torch_runtime():
    model, cluster, job, rows = _candidate_rows("tiny", 2, 128, 8)
    assert screen_lower_bounds(model, cluster, job, H100, rows, options=TORCH_OPTIONS) is None


def test_screen_prices_the_middle_stage_with_the_most_moe_layers():
    """DeepSeek-V3 on Megatron-Bridge's layout (three leading dense layers): rank 1 holds
    as many layers as ranks 2-6 but two of them dense; the screen's peak memory and time
    follow the heavier ranks, as the simulator's do."""
    model = get_preset("deepseek-v3")
    cluster = ClusterSpec(hardware="h100-sxm-80gb", num_gpus=1024)
    job = TrainingJob(seq_length=4096, global_batch_size=8192)
    plan = ParallelPlan(
        tp=2, pp=8, vpp=4, ep=8, etp=1, dp=64, micro_batch_size=1, sequence_parallel=True,
        recompute="full", distributed_optimizer=True, overlap_grad_reduce=True,
        schedule="interleaved", pipeline_model_parallel_layout="Et|(tt|)*30mL",
    )  # fmt: skip
    screened = screen_plans(model, cluster, job, H100, plans_frame([plan]))
    simulated = estimate_plan(model, cluster, job, plan, H100)
    assert abs(screened["peak_memory_bytes"][0] / simulated.peak_memory_bytes - 1) < 0.01
    assert abs(screened["iteration_time_s"][0] / simulated.iteration_time_s - 1) < 0.05


def test_screen_and_bound_read_one_set_of_priced_parts(monkeypatch):
    """The screen and its bound take their layer, group and parameter columns from one
    function, so that a change to how a part is priced moves both."""
    model, cluster, job, rows = _candidate_rows("tiny", 8, 512, 32)
    rows = rows.head(50)
    seen = []
    shared = megatron_screen.priced_parts

    def counted(*args, **kwargs):
        parts = shared(*args, **kwargs)
        seen.append([sorted(p.columns) for p in parts])
        return parts

    monkeypatch.setattr(megatron_screen, "priced_parts", counted)
    screen_plans(model, cluster, job, H100, rows)
    screen_lower_bounds(model, cluster, job, H100, rows)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert any("f_d" in columns for columns in seen[0])  # the dense layer's forward
