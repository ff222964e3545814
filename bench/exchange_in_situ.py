"""What a plan's layer exchanges cost inside its own training step, measured by taking them
out, against what the cost model charges for them.

For each case, runs alternate the real plan and the same plan whose exchanges are local
copies of the same shape (a `executor.run.RunConfig.setup` that patches the executor in
every rank before the engine is built):

- ``cp2`` (tiny, cp 2): the K/V all-gather of `executor.context_parallel._gather_sequence`
  (and its reduce-scatter backward) becomes a concatenation of the rank's own shard;
- ``moe-ep2`` (tiny-moe, dp 2, ep 2): the count exchange and the token exchanges of
  `executor.moe.MoE._dispatch_compute_combine` become copies of the rank's own counts and
  rows;
- ``moe-ep2-balanced``: the same, with the real plan's routed rows split evenly over the
  experts (`even_counts`; the same rows, labelled to other experts), so that both ranks
  compute the same number of rows, as the local copy does and the cost model assumes. An
  untrained router splits a layer's rows unevenly, and the rank with fewer rows waits for
  its peer in the combine; the difference of the two cases is that wait.

The exchange's in-situ cost is the median over rounds of (real - local) median steps, each
pair run back to back so that both see one state of a shared host. The model's figure is the
plan's exposed context- or expert-parallel time per step (`costmodel.estimate.simulate_plan`
on ``--profile``). Timings on a shared host are noisy: the table keeps every pair.

    .venv/bin/python bench/exchange_in_situ.py --profile WORK/profile.json [--rounds 3]
        [--work DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed

from costmodel.estimate import simulate_plan
from costmodel.execution_presets import TORCH_OPTIONS
from executor.run import RunConfig, engine_setup, execute
from profiles.host_probe import host_probe
from profiles.store import load_profile
from specs.bundle import PlanBundle
from specs.cluster import ClusterSpec
from specs.errors import SpecError
from specs.job import TrainingJob
from specs.plan import ParallelPlan
from specs.presets import get_preset

STEPS, WARMUP = 12, 2
"""Measured (the last two profiled) and warm-up steps of every run."""
JOB = TrainingJob(seq_length=128, global_batch_size=8, precision="fp32")
"""The fidelity benchmark's job."""


def _local_gather(x_BGSK: torch.Tensor, group) -> torch.Tensor:
    """The CP gather's shape without the exchange: the rank's shard repeated cp times."""
    world = torch.distributed.get_world_size(group)
    x_SBGK = x_BGSK.permute(2, 0, 1, 3).contiguous()
    return torch.cat([x_SBGK] * world).permute(1, 2, 0, 3)


def _local_all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group):
    """The token exchange's shape without the exchange (counts kept local: sum(out) rows)."""
    return x.contiguous()[: sum(out_splits)] * 1.0


class _LocalCounts:
    """``torch.distributed`` as `executor.moe` sees it, with a local count exchange."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.distributed, name)

    @staticmethod
    def all_to_all_single(output: torch.Tensor, input: torch.Tensor, group=None) -> None:
        output.copy_(input)


def local_cp_setup(bundle, info, seed):
    """`engine_setup` with the CP gather made local."""
    import executor.context_parallel as cp

    cp._gather_sequence = _local_gather
    return engine_setup(bundle, info, seed)


def local_moe_setup(bundle, info, seed):
    """`engine_setup` with the MoE count and token exchanges made local."""
    import executor.moe as moe

    moe._all_to_all = _local_all_to_all
    moe.dist = _LocalCounts()
    return engine_setup(bundle, info, seed)


def even_counts(counts_E: torch.Tensor, rows: int) -> torch.Tensor:
    """``rows`` split as evenly as can be over the experts of ``counts_E``."""
    even = torch.full_like(counts_E, rows // counts_E.numel())
    even[: rows - int(even.sum())] += 1
    return even


def balanced_moe_setup(bundle, info, seed):
    """`engine_setup` with every MoE layer's routed rows split evenly over the experts."""
    import executor.moe as moe

    routed = moe.MoE._dispatch_compute_combine

    def balanced(self, x_AD: torch.Tensor, counts_E: torch.Tensor):
        return routed(self, x_AD, even_counts(counts_E, x_AD.shape[0]))

    moe.MoE._dispatch_compute_combine = balanced
    return engine_setup(bundle, info, seed)


CASES = {
    "cp2": ("tiny", ParallelPlan(cp=2), local_cp_setup, "cp", None),
    "moe-ep2": ("tiny-moe", ParallelPlan(dp=2, ep=2), local_moe_setup, "ep", None),
    "moe-ep2-balanced": (
        "tiny-moe",
        ParallelPlan(dp=2, ep=2),
        local_moe_setup,
        "ep",
        balanced_moe_setup,
    ),
}
"""name -> (model preset, plan, local setup, the lane its exchanges are priced on, the real
run's setup: None for the executor's own)."""


def _bundle(model: str, plan: ParallelPlan, profile: str) -> PlanBundle:
    cluster = ClusterSpec(hardware=profile, num_gpus=plan.world_size)
    return PlanBundle(model=get_preset(model), cluster=cluster, job=JOB, plan=plan)


def _median_step(bundle: PlanBundle, out: Path, setup) -> float:
    execute(
        RunConfig(
            bundle=bundle, out_dir=str(out), steps=STEPS, warmup=WARMUP, setup=setup,
            host_probe=host_probe,
        )
    )  # fmt: skip
    return float(json.loads((out / "metrics.json").read_text())["iteration_time_p50_s"])


def predicted_exchange_s(bundle: PlanBundle, lane: str, profile_path: str) -> float:
    """The model's exposed ``lane`` time per step of ``bundle``."""
    b = bundle
    est, _ = simulate_plan(
        b.model,
        b.cluster,
        b.job,
        b.plan,
        load_profile(profile_path),
        timeline=False,
        options=TORCH_OPTIONS,
    )
    return getattr(est.breakdown, f"{lane}_exposed_s")


def measure_case(name: str, profile: str, rounds: int, work: Path) -> dict[str, Any]:
    """Alternating real and local runs of one case, and the model's figure."""
    model, plan, local, lane, setup = CASES[name]
    bundle = _bundle(model, plan, profile)
    pairs = []
    for k in range(rounds):
        real = _median_step(bundle, work / f"{name}-real-{k}", setup)
        alone = _median_step(bundle, work / f"{name}-local-{k}", local)
        pairs.append((real, alone))
        print(
            f"  {name} round {k + 1}/{rounds}: real {real * 1e3:.1f} ms, local "
            f"{alone * 1e3:.1f} ms, exchange {(real - alone) * 1e3:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
    measured = statistics.median(r - a for r, a in pairs)
    return {
        "name": name,
        "plan": plan.label(),
        "pairs_s": pairs,
        "measured_exchange_s": measured,
        "predicted_exchange_s": predicted_exchange_s(bundle, lane, profile),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="a 2-rank profile of this machine")
    parser.add_argument("--rounds", type=int, default=3, help="real/local pairs per case")
    parser.add_argument("--work", default=None, help="run folders (default: a temp folder)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise SpecError(f"--rounds must be at least 1, got {args.rounds}")
    load_profile(args.profile)  # fails early with the loader's message
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.work or scratch)
        rows = [measure_case(n, args.profile, args.rounds, work) for n in args.cases]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| plan | in situ (ms/step) | predicted (ms/step) | error | pairs (real/local ms) |")
    print("|---|---|---|---|---|")
    for r in rows:
        m, p = r["measured_exchange_s"], r["predicted_exchange_s"]
        pairs = ", ".join(f"{a * 1e3:.0f}/{b * 1e3:.0f}" for a, b in r["pairs_s"])
        error = f"{(p - m) / m:+.1%}" if m > 0 else "n/a (no measured cost)"
        print(f"| {r['name']} ({r['plan']}) | {m * 1e3:.1f} | {p * 1e3:.1f} | {error} | {pairs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
