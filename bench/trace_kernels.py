"""Transcendental kernels and Python gaps in a fidelity bench's profiled steps, per plan.

For every plan folder of a `bench/fidelity.py` work folder (``runs/<plan>/`` with
``plan.json``, ``metrics.json`` and ``traces/rank*.json``) this prints, in milliseconds per
step and averaged over the ranks and the profiled steps:

- ``profiled``: the profiled steps' length (the ``paraplan/step`` ranges), and ``median``
  the run's median iteration (``metrics.json``); the profiled steps carry the profiler's
  own cost and may fall in a slow spell of the host, so each figure below is also given
  scaled by median / profiled;
- ``kernels``: the inclusive time of the transcendental kernels (`KERNEL_EVENTS`: SiLU and
  GELU, forward and backward, and the loss's ``log_softmax`` and its backward);
- ``charged``: what the ``torch`` runtime charges for the same kernels with the work
  folder's profile: per kernel one element-wise call (`HostRates.elementwise_op_s`), its
  counted bytes at `HostRates.elementwise_Bps` and the probe's prices
  (`costmodel.runtimes.torch.transcendental_rates`), from the operator counts of the rank's
  chunks (`costmodel.runtimes.torch.passes.chunk_ops`) over its microbatches, a recompute's
  rerun included;
- ``gaps``: the time between consecutive operators of the main thread shorter than
  `SMALL_GAP_S` (Python between operators; longer gaps are waits).

Usage: ``python bench/trace_kernels.py WORK_FOLDER`` (the profile is
``WORK_FOLDER/profile.json``, ``profile-1.json`` for one-rank plans).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.runtimes.torch.host_rates import HostRates
from costmodel.runtimes.torch.ops import HostOps
from costmodel.runtimes.torch.passes import chunk_ops
from costmodel.runtimes.torch.rates import host_rates
from costmodel.runtimes.torch.shapes import rank_shape
from costmodel.runtimes.torch.transcendental_rates import COUNTED_BYTES_PER_ELEMENT
from costmodel.schedules import plan_stage_chunks
from profiles.schema import HardwareProfile
from profiles.store import load_profile
from specs import serde
from specs.bundle import PlanBundle

KERNEL_EVENTS = {
    "aten::silu": ("forward", "activation"),
    "aten::gelu": ("forward", "activation"),
    "aten::silu_backward": ("backward", "activation"),
    "aten::gelu_backward": ("backward", "activation"),
    "aten::_log_softmax": ("forward", "log_softmax"),
    "aten::_log_softmax_backward_data": ("backward", "log_softmax"),
}
"""Trace events of the transcendental kernels: (pass, kind)."""
PROBED = {
    ("forward", "activation"): "silu",
    ("backward", "activation"): "silu_backward",
    ("forward", "log_softmax"): "log_softmax",
    ("backward", "log_softmax"): "log_softmax_backward",
}
"""The probed kernel whose counted bytes stand for each (pass, kind)."""
SMALL_GAP_S = 25e-6
"""Gaps between operators shorter than this are Python between them, longer ones waits."""
STEP_PREFIX = "paraplan/step"
"""Name prefix of a profiled step's range in the executor's traces."""


@dataclass(kw_only=True, slots=True)
class StepFigures:
    """One profiled step of one rank, seconds."""

    step_s: float
    """The step's range."""
    kernels_s: dict[tuple[str, str], float] = field(default_factory=dict)
    """Inclusive time of the transcendental kernels by (pass, kind)."""
    small_gaps_s: float = 0.0
    """Gaps between operators shorter than `SMALL_GAP_S`."""


def step_figures(events: list[dict[str, Any]]) -> list[StepFigures]:
    """Per profiled step of one rank's Chrome trace events (complete events, µs): its
    length, transcendental kernel time and short gaps between the operators of its
    thread."""
    complete = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in complete if e["name"].startswith(STEP_PREFIX)), key=_ts)
    out = []
    for step in steps:
        end = step["ts"] + step["dur"]
        inside = [
            e
            for e in complete
            if e is not step and e.get("tid") == step["tid"] and step["ts"] <= e["ts"] <= end
        ]
        figures = StepFigures(step_s=step["dur"] * 1e-6)
        for e in inside:
            key = KERNEL_EVENTS.get(e["name"])
            if key is not None:
                figures.kernels_s[key] = figures.kernels_s.get(key, 0.0) + e["dur"] * 1e-6
        ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in inside if e.get("cat") == "cpu_op")
        reached = step["ts"]
        for start, stop in ops:
            gap_s = (start - reached) * 1e-6
            if 0 < gap_s < SMALL_GAP_S:
                figures.small_gaps_s += gap_s
            reached = max(reached, stop)
        out.append(figures)
    return out


def _ts(event: dict[str, Any]) -> float:
    return event["ts"]


def charged_s(work: HostOps, rates: HostRates, *, backward: bool) -> float:
    """What the runtime charges the transcendental kernels of ``work`` (module doc)."""
    pass_name = "backward" if backward else "forward"
    total = 0.0
    for kind, kernels, elements in (
        ("activation", work.activation_kernels, work.activation_elements),
        ("log_softmax", work.log_softmax_kernels, work.log_softmax_elements),
    ):
        price = getattr(rates.transcendental, f"{kind}_{pass_name}")
        counted_bytes = COUNTED_BYTES_PER_ELEMENT[PROBED[(pass_name, kind)]]
        total += kernels * rates.elementwise_op_s + elements * counted_bytes / rates.elementwise_Bps
        total += price.extra_s(kernels, elements)
    return total


def stage_charged_s(bundle: PlanBundle, profile: HardwareProfile, stage: int) -> float:
    """Seconds per step the runtime charges the transcendental kernels of pipeline stage
    ``stage`` (every chunk, every microbatch, a recompute's rerun in the backward)."""
    model, plan = bundle.model, bundle.plan
    rates = host_rates(profile)
    microbatches = plan.num_microbatches(bundle.job.global_batch_size)
    x = rank_shape(plan, bundle.job.seq_length, microbatches)
    total = 0.0
    for chunk in plan_stage_chunks(model, plan, stage):
        ops, rerun = chunk_ops(
            model, profile, rates, plan, x, chunk.layers, first=chunk.first, last=chunk.last
        )
        total += charged_s(ops.forward, rates, backward=False)
        total += charged_s(ops.backward, rates, backward=True)
        total += charged_s(rerun.forward, rates, backward=False)
    return total * microbatches


def plan_row(folder: Path, profile: HardwareProfile) -> dict[str, float]:
    """The module doc's figures of one plan folder, seconds per step."""
    bundle = serde.load(PlanBundle, folder / "plan.json")
    median_s = json.loads((folder / "metrics.json").read_text())["iteration_time_p50_s"]
    traces = sorted((folder / "traces").glob("rank*.json"))
    per_rank = [step_figures(json.loads(t.read_text())["traceEvents"]) for t in traces]
    steps = [s for rank in per_rank for s in rank]
    ranks_per_stage = len(traces) // bundle.plan.pp
    stages = [int(t.stem.removeprefix("rank")) // ranks_per_stage for t in traces]
    return {
        "median": median_s,
        "profiled": statistics.fmean(s.step_s for s in steps),
        "kernels": statistics.fmean(sum(s.kernels_s.values()) for s in steps),
        "charged": statistics.fmean(stage_charged_s(bundle, profile, st) for st in stages),
        "gaps": statistics.fmean(s.small_gaps_s for s in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", type=Path, help="a bench/fidelity.py work folder")
    args = parser.parse_args()
    profiles: dict[str, HardwareProfile] = {}
    print(
        f"{'plan':14s} {'median':>7s} {'profiled':>8s} {'kernels':>8s} {'scaled':>7s} "
        f"{'charged':>8s} {'gaps':>7s} {'scaled':>7s}   (ms per step)"
    )
    for folder in sorted(p for p in (args.work / "runs").iterdir() if "." not in p.name):
        if not (folder / "traces").is_dir():
            continue
        one_rank = len(list((folder / "traces").glob("rank*.json"))) == 1
        name = "profile-1.json" if one_rank else "profile.json"
        if name not in profiles:
            profiles[name] = load_profile(str(args.work / name))
        row = plan_row(folder, profiles[name])
        k = row["median"] / row["profiled"]
        print(
            f"{folder.name:14s} {row['median'] * 1e3:7.1f} {row['profiled'] * 1e3:8.1f} "
            f"{row['kernels'] * 1e3:8.2f} {row['kernels'] * k * 1e3:7.2f} "
            f"{row['charged'] * 1e3:8.2f} {row['gaps'] * 1e3:7.2f} {row['gaps'] * k * 1e3:7.2f}"
        )


if __name__ == "__main__":
    main()
