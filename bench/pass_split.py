"""A microbatch's forward, backward and recompute measured inside a training loop, against
the cost model's split of the same plan, in one process and in minutes.

Why: a plan's iteration time only fixes the sum of its passes, and a calibration fitted on
iteration times (`reports.calibrate`) scales that sum; how the cost model splits it between
the forward and the backward decides what a recompute, which reruns the forward, is
predicted to add. This benchmark times the split directly.

One process runs the executor's model (`executor.model.build_model`, the engine's
recompute switches) at one rank's fair share of the cores and with the OpenMP settings the
executor gives a rank (the script runs itself again under them when they are missing),
round by round: in each round
the plain model, then selective recompute (the attention core checkpointed), then full
recompute (each layer checkpointed; `executor.model.plan_full_recompute`), each over
``--microbatches`` microbatches whose forward (to the loss) and ``backward()`` are timed
apart, gradients accumulated and cleared after the round as a step does. Adjacent variants
share one state of a shared host, so their differences are steadier than their levels. The
figures are medians over the rounds after ``--warmup-rounds``.

The prediction is `costmodel.estimate.simulate_plan` of the same plan on one rank on
``--profile`` (a one-rank profile of this machine), its breakdown per microbatch: forward,
backward, and the recompute the backward reruns (its checkpoint hooks included). The
measured backward holds the rerun, so it compares with backward + recompute.

    .venv/bin/python bench/pass_split.py --profile PROFILE.json [--mbs 1] [--rounds 40]
        [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from costmodel.estimate import simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from executor.model import build_model, plan_full_recompute
from executor.pipeline import lm_loss
from profiles.store import load_profile
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.host import available_cpus, spin_wait_env, threads_per_rank
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

THREADS = threads_per_rank(available_cpus(), 1)
"""Intra-op threads: one rank's fair share of the cores, as the executor gives a rank."""
VARIANTS = ("none", "selective", "full")
"""Recompute settings timed in each round, in this order."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Split:
    """Seconds per microbatch of one recompute setting."""

    forward_s: float
    backward_s: float
    """The ``backward()`` call, a recompute's rerun included."""


def plan_of(args: argparse.Namespace, recompute: str) -> ParallelPlan:
    """The one-rank plan both sides run with ``recompute``."""
    return ParallelPlan(micro_batch_size=args.mbs, recompute=recompute)


def predicted(args: argparse.Namespace, recompute: str) -> Split:
    """The cost model's split of the plan with ``recompute`` (module doc)."""
    microbatches = args.microbatches
    plan = plan_of(args, recompute)
    job = TrainingJob(
        seq_length=args.seq_len,
        global_batch_size=args.mbs * microbatches,
        precision="fp32",
    )
    cluster = ClusterSpec(hardware=args.profile, num_gpus=1)
    estimate, _ = simulate_plan(
        get_preset(args.model),
        cluster,
        job,
        plan,
        load_profile(args.profile),
        timeline=False,
        options=TORCH_OPTIONS,
    )
    b = estimate.breakdown
    return Split(
        forward_s=b.compute_forward_s / microbatches,
        backward_s=(b.compute_backward_s + b.compute_recompute_s) / microbatches,
    )


def measured(args: argparse.Namespace) -> dict[str, Split]:
    """Each setting's median forward and backward per microbatch (module doc)."""
    torch.set_num_threads(THREADS)
    spec = get_preset(args.model)
    model = build_model(spec, seed=0)
    keys = list(model.layers.keys())
    cores = [model.layers[k].attention for k in keys]
    tokens = torch.randint(0, spec.vocab_size, (args.microbatches * args.mbs, args.seq_len + 1))
    times: dict[str, tuple[list[float], list[float]]] = {v: ([], []) for v in VARIANTS}
    for round_ in range(args.warmup_rounds + args.rounds):
        for variant in VARIANTS:
            plan = plan_of(args, variant)
            model.full_recompute_groups = (
                plan_full_recompute(keys, plan.recompute_method, plan.recompute_num_layers)
                if variant == "full"
                else []
            )
            for attention in cores:
                attention.recompute_core = variant == "selective"
            forward, backward = times[variant]
            for i in range(args.microbatches):
                batch = tokens[i * args.mbs : (i + 1) * args.mbs]
                start = time.perf_counter()
                loss = lm_loss(model(batch[:, :-1]), batch[:, 1:])
                mid = time.perf_counter()
                (loss / args.microbatches).backward()
                end = time.perf_counter()
                if round_ >= args.warmup_rounds:
                    forward.append(mid - start)
                    backward.append(end - mid)
            model.zero_grad(set_to_none=True)
        print(f"\rround {round_ + 1}/{args.warmup_rounds + args.rounds}", end="", file=sys.stderr)
    print(file=sys.stderr)
    return {
        v: Split(forward_s=statistics.median(f), backward_s=statistics.median(b))
        for v, (f, b) in times.items()
    }


def table(found: dict[str, Split], model: dict[str, Split]) -> list[dict[str, Any]]:
    """Per setting: measured and predicted ms per microbatch, the backward over the
    forward, and what the setting adds to the plain step (measured and predicted)."""
    rows = []
    for v in VARIANTS:
        m, p = found[v], model[v]
        rows.append(
            {
                "recompute": v,
                "measured_forward_ms": m.forward_s * 1e3,
                "predicted_forward_ms": p.forward_s * 1e3,
                "measured_backward_ms": m.backward_s * 1e3,
                "predicted_backward_ms": p.backward_s * 1e3,
                "measured_backward_over_forward": m.backward_s / m.forward_s,
                "predicted_backward_over_forward": p.backward_s / p.forward_s,
                "measured_added": _added(m, found["none"]),
                "predicted_added": _added(p, model["none"]),
            }
        )
    return rows


def _added(split: Split, plain: Split) -> float:
    """What ``split`` adds to the plain microbatch, relative to it."""
    total = plain.forward_s + plain.backward_s
    return (split.forward_s + split.backward_s) / total - 1.0


def _with_rank_environment() -> None:
    """Run again under the OpenMP settings the executor gives a rank (`specs.host.
    spin_wait_env`) when they are missing: OpenMP reads them once, as torch loads."""
    missing = spin_wait_env(THREADS, False, os.environ)
    if missing:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **missing})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", required=True, help="a one-rank profile of this machine")
    parser.add_argument("--model", default="tiny", help="model preset (default tiny)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--mbs", type=int, default=1, help="micro-batch size")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup-rounds", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    if min(args.mbs, args.microbatches, args.rounds) < 1 or args.warmup_rounds < 0:
        raise SpecError(
            "--mbs, --microbatches and --rounds must be at least 1 and --warmup-rounds at "
            f"least 0; got {args.mbs}, {args.microbatches}, {args.rounds}, "
            f"{args.warmup_rounds}"
        )
    _with_rank_environment()
    model = {v: predicted(args, v) for v in VARIANTS}
    rows = table(measured(args), model)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.model} mbs {args.mbs}, {THREADS} threads, ms per microbatch (measured / model)")
    for r in rows:
        print(
            f"  {r['recompute']:<9} forward {r['measured_forward_ms']:6.2f} / "
            f"{r['predicted_forward_ms']:6.2f}  backward {r['measured_backward_ms']:6.2f} / "
            f"{r['predicted_backward_ms']:6.2f}  B/F {r['measured_backward_over_forward']:.2f}"
            f" / {r['predicted_backward_over_forward']:.2f}  adds "
            f"{r['measured_added']:+.1%} / {r['predicted_added']:+.1%}"
        )


if __name__ == "__main__":
    main()
