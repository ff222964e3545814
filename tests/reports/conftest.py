"""A synthetic but realistic run for the report tests: Llama-3-8B-shaped, 8 GPUs,
tp2 pp2 dp2, 1F1B with 16 microbatches, timed by a tiny event loop here.

The "measured" side is the prediction with seeded jitter (compute ~6% slower, comm ~15%
slower), so every number in the report is non-trivial and known to be close but not equal.
Predicted shows one rank per pipeline stage (0 and 4); measured shows all eight.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs import serde
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.job import TrainingJob
from specs.model import ModelSpec
from specs.plan import ParallelPlan
from specs.timeline import Timeline, TimelineEvent
from tests.reports.calibrate_runs import PROFILE

TP, PP, DP, MICROBATCHES = 2, 2, 2, 16


@dataclass(frozen=True)
class SampleRun:
    bundle: PlanBundle
    estimate: dict[str, Any]
    predicted: Timeline
    measured: Timeline
    metrics: dict[str, Any]
    candidates: dict[str, Any]


def order_1f1b(stage: int) -> list[tuple[str, int]]:
    """Megatron's 1F1B order for one stage: pp - stage - 1 warm-up forwards, then F/B pairs."""
    warm = min(PP - stage - 1, MICROBATCHES)
    order = [("F", j) for j in range(warm)]
    for i in range(MICROBATCHES - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", j) for j in range(MICROBATCHES - warm, MICROBATCHES)]


def time_pipeline(
    f_s: float, b_s: float, p2p_s: float
) -> dict[int, list[tuple[str, int, float, float]]]:
    """Start and end of every action per stage (F waits for the previous stage's F, B for
    the next stage's B and its own F)."""
    orders = {s: order_1f1b(s) for s in range(PP)}
    ends: dict[tuple[int, str, int], float] = {}
    free = [0.0] * PP
    done: dict[int, list[tuple[str, int, float, float]]] = {s: [] for s in range(PP)}
    while any(len(done[s]) < len(orders[s]) for s in range(PP)):
        for s in range(PP):
            if len(done[s]) == len(orders[s]):
                continue
            phase, j = orders[s][len(done[s])]
            deps = [((s - 1, "F", j), p2p_s)] if phase == "F" and s > 0 else []
            if phase == "B":
                deps.append(((s, "F", j), 0.0))
                if s < PP - 1:
                    deps.append(((s + 1, "B", j), p2p_s))
            if not all(d in ends for d, _ in deps):
                continue
            start = max([free[s]] + [ends[d] + lag for d, lag in deps])
            end = start + (f_s if phase == "F" else b_s)
            ends[(s, phase, j)] = free[s] = end
            done[s].append((phase, j, start, end))
    return done


def _ev(
    rank: int, lane: str, kind: str, name: str, start_s: float, duration_s: float, **extra: Any
) -> TimelineEvent:
    return TimelineEvent(
        rank=rank, lane=lane, kind=kind, name=name, start_s=start_s, duration_s=duration_s, **extra
    )


def rank_events(rank: int, stage: int, jitter: random.Random | None) -> list[TimelineEvent]:
    """One rank's iteration: F/B with two TP all-reduces inside each, a P2P send after
    each F (B) that has a next (previous) stage, then DP reduce-scatter, Adam, all-gather."""

    def d(seconds: float, slow: float) -> float:
        return seconds * (1 + jitter.gauss(slow, 0.03)) if jitter else seconds

    slow_c, slow_m = (0.06, 0.15) if jitter else (0.0, 0.0)
    timed = time_pipeline(d(0.041, slow_c), d(0.082, slow_c), d(0.002, slow_m))[stage]
    events: list[TimelineEvent] = []
    for phase, j, start, end in timed:
        kind = "forward" if phase == "F" else "backward"
        events.append(
            _ev(rank, "compute", kind, f"{phase} mb{j}", start, end - start, microbatch=j, chunk=0)
        )
        for frac in (0.35, 0.8):
            events.append(
                _ev(
                    rank,
                    "tp",
                    "all_reduce",
                    f"tp all_reduce {phase} mb{j}",
                    start + frac * (end - start),
                    d(0.004 if phase == "F" else 0.006, slow_m),
                    microbatch=j,
                    bytes=33_554_432,
                    group="tp",
                )
            )
        if (phase == "F" and stage < PP - 1) or (phase == "B" and stage > 0):
            events.append(
                _ev(
                    rank,
                    "pp",
                    "send",
                    f"pp send {phase} mb{j}",
                    end,
                    d(0.002, slow_m),
                    microbatch=j,
                    bytes=16_777_216,
                    group="pp",
                )
            )
    last = max(e.end_s for e in events)
    rs_s, opt_s, ag_s = d(0.055, slow_m), d(0.03, slow_c), d(0.028, slow_m)
    return [
        *events,
        _ev(
            rank,
            "dp",
            "reduce_scatter",
            "dp reduce_scatter grads",
            last,
            rs_s,
            bytes=1_006_632_960,
            group="dp",
        ),
        _ev(rank, "optimizer", "optimizer", "adam step", last + rs_s, opt_s),
        _ev(
            rank,
            "dp",
            "all_gather",
            "dp all_gather params",
            last + rs_s + opt_s,
            ag_s,
            bytes=503_316_480,
            group="dp",
        ),
    ]


def sample_bundle() -> PlanBundle:
    model = ModelSpec(
        name="llama3-8b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=128256,
    )
    return PlanBundle(
        model=model,
        cluster=ClusterSpec(hardware="h100-sxm-80gb", num_gpus=8, gpus_per_node=8),
        job=TrainingJob(seq_length=4096, global_batch_size=32),
        plan=ParallelPlan(tp=TP, pp=PP, dp=DP, sequence_parallel=True, distributed_optimizer=True),
    )


def sample_metrics(iteration_s: float, jitter: random.Random) -> dict[str, Any]:
    steps = [iteration_s * (1 + jitter.gauss(0, 0.02)) for _ in range(20)]
    steps[0] *= 1.8  # warm-up step
    ordered = sorted(steps)
    return {
        "iteration_time_s": steps,
        "iteration_time_p50_s": ordered[10],
        "iteration_time_p95_s": ordered[18],
        "tokens_per_s": 32 * 4096 / ordered[10],
        "mfu": 0.39,
        "loss": [11.9 * 0.93**i + 2.0 for i in range(20)],
        "peak_memory_gib": [52.1, 52.3, 51.8, 52.0, 40.2, 40.6, 40.1, 40.4],
        "collectives": [
            {"op": "all_reduce", "group": "tp", "bytes": 64 * 33_554_432, "count": 64},
            {"op": "reduce_scatter_tensor", "group": "dp", "bytes": 1_006_632_960, "count": 1},
            {"op": "all_gather_into_tensor", "group": "dp", "bytes": 503_316_480, "count": 1},
            {"op": "isend", "group": "pp", "bytes": 16 * 16_777_216, "count": 16},
        ],
    }


def sample_estimate(iteration_s: float) -> dict[str, Any]:
    names = ("weights", "gradients", "optimizer", "activations", "buffers")
    parts = [
        dict(zip(names, (7.6, 7.6, 11.4, 19.3, 2.1), strict=True)),
        dict(zip(names, (7.9, 7.9, 11.8, 9.6, 2.1), strict=True)),
    ]
    return {
        "iteration_time_s": iteration_s,
        "tokens_per_s": 32 * 4096 / iteration_s,
        "model_tflops_per_gpu": 412.0,
        "mfu": 0.417,
        "hfu": 0.417,
        "flops_per_iteration": 6.4e15,
        "peak_memory_gib": sum(parts[0].values()),
        "fits": True,
        "memory": [
            {"stage": i, "total_gib": sum(p.values()), "parts": p} for i, p in enumerate(parts)
        ],
        "breakdown": {
            "compute_forward": 0.70,
            "compute_backward": 1.39,
            "bubble": 0.12,
            "tp_exposed": 0.0,
            "pp_exposed": 0.03,
            "dp_exposed": 0.083,
            "optimizer": 0.03,
        },
    }


def sample_candidates(iteration_s: float) -> dict[str, Any]:
    return {
        "explanation": "tp2 pp2 dp2 wins: fastest plan that fits in 80 GiB; "
        "tp4 pp1 dp2 needs 91 GiB <script>alert(1)</script>",
        # the shape of candidates.json (`paraplan plan --out`): plan fields, label, estimate keys
        "plans": [
            {
                "label": "tp2 pp2 dp2 mbs1 sp distopt",
                "tp": 2,
                "pp": 2,
                "dp": 2,
                "iteration_time_s": iteration_s,
                "tokens_per_s": 58619.0,
                "mfu": 0.417,
                "peak_memory_gib": 48.0,
                "fits": True,
            },
            {
                "label": "tp2 pp4 dp1 mbs1 sp distopt",
                "tp": 2,
                "pp": 4,
                "dp": 1,
                "iteration_time_s": iteration_s * 1.12,
                "tokens_per_s": 52338.0,
                "mfu": 0.372,
                "peak_memory_gib": 31.5,
                "fits": True,
            },
        ],
    }


def build_sample_run() -> SampleRun:
    jitter = random.Random(7)
    p_events = [e for rank in (0, 4) for e in rank_events(rank, rank // (TP * DP), None)]
    m_events = [e for rank in range(8) for e in rank_events(rank, rank // (TP * DP), jitter)]
    p_iter = max(e.end_s for e in p_events)
    m_iter = max(e.end_s for e in m_events)
    predicted = Timeline(
        source="predicted",
        events=tuple(p_events),
        iteration_time_s=p_iter,
        ranks_shown=(0, 4),
        note="one rank per pipeline stage",
    )
    measured = Timeline(
        source="measured",
        events=tuple(m_events),
        iteration_time_s=m_iter,
        ranks_shown=tuple(range(8)),
        note="step 12 of 20, torch.profiler",
    )
    return SampleRun(
        bundle=sample_bundle(),
        estimate=sample_estimate(p_iter),
        predicted=predicted,
        measured=measured,
        metrics=sample_metrics(m_iter, jitter),
        candidates=sample_candidates(p_iter),
    )


def write_run_files(folder: Path, run: SampleRun, *, measured: bool = True) -> Path:
    """Write the sample as a run folder (the files `reports.run_dir` reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(serde.dumps(run.bundle))
    (folder / "estimate.json").write_text(json.dumps(run.estimate))
    (folder / "predicted.json").write_text(serde.dumps(run.predicted))
    if measured:
        (folder / "measured.json").write_text(serde.dumps(run.measured))
        (folder / "metrics.json").write_text(json.dumps(run.metrics))
    return folder


@pytest.fixture(scope="session")
def sample_run() -> SampleRun:
    return build_sample_run()


@pytest.fixture
def write_run() -> Callable[..., Path]:
    """`write_run_files` as a fixture (test modules cannot import conftest)."""
    return write_run_files


@pytest.fixture(scope="module")
def base() -> HardwareProfile:
    """The stored CPU profile the calibration tests start from (`calibrate_runs.PROFILE`)."""
    return load_profile(str(PROFILE))
