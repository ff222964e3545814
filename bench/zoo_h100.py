"""The Megatron-MoE model zoo's Qwen3 235B-A22B runs on 256 H100, priced as their table and
command state: five strategies for one model, cluster, sequence and batch that no row of
``published-runs-dev.csv`` holds and no fit sees, so their errors and their order are out of
sample.

Source: yanring/Megatron-MoE-ModelZoo ``best_practice/qwen3/readme.md`` at e8650517, "H100"
table (256 H100, NVLink 4, InfiniBand 8x50 GB/s; BF16, sequence 4096, global batch 2048,
etp 1), its ``run_h100_235b.sh`` and ``sbatch_benchmarking.sh``:

- every BF16 command adds ``--tp-comm-overlap`` (``PR=bf16``) and, through the model's YAML,
  sequence parallelism, the distributed optimizer with overlapped gradient reduction and
  parameter gather, and the embedding and loss counted as pipeline layers;
- ``DeepEP`` in the table's dispatcher column is ``--moe-token-dispatcher-type flex``, ``A2A``
  the alltoall dispatcher; the runs' CUDA graph scopes are those of ``run_h100_235b.sh``
  (``moe_router``, ``moe_preprocess``), the command of the cross-node run;
- recompute "norm, act" is ``--recompute-modules layernorm moe_act``; "full" full recompute;
- "FSDP On" is priced as Megatron-FSDP sharding parameters, gradients and optimizer state
  (``optim_grads_params``); the table names no strategy, so that row is an assumption.

Each run is built from dev-set row 390 (the same model's GB200 row: its model columns) with
the run's plan, cluster and batch columns (`zoo_run_case`).

Usage: ``python bench/zoo_h100.py [--json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from dataclasses import dataclass

from published_csv import rows_by_ids
from published_rows import RowCase, case_for_row
from row_figures import case_estimate
from validation_stats import concordance

BASE_ROW = "390"
"""The dev-set row whose model columns every run shares (module docstring)."""

H100_COLUMNS: dict[str, str] = {
    "source_id": "MOEZOO-QWEN3-H100",
    "gpu_type": "H100",
    "system": "DGX H100, NVLink 4, InfiniBand 8x50 GB/s",
    "num_gpus": "256",
    "etp": "1",
    "global_batch_size": "2048",
    "sequence_parallel": "yes",
    "precision": "BF16",
    "tflops_per_gpu": "",
    "derived_fields": "",
}
"""Columns every H100 run shares (module docstring)."""

NORM_ACT = ("layernorm", "moe_act")


@dataclass(frozen=True, kw_only=True)
class ZooRun:
    """One run of the H100 table; the defaults are the values most of its rows share."""

    name: str
    step_s: float
    """Published step time, seconds."""
    tp: int = 2
    pp: int = 8
    vpp: int = 4
    ep: int = 8
    dp: int
    micro_batch_size: int = 1
    dispatcher: str = "flex"
    """``flex`` (DeepEP) or ``alltoall`` (A2A)."""
    recompute: str = "selective"
    """``selective`` ("norm, act"), ``full`` or ``none``."""
    a2a_overlap: bool = False
    megatron_fsdp: bool = False


CROSS_NODE = ZooRun(name="cross-node ep32", ep=32, dp=16, step_s=19.7)
RUNS = (
    CROSS_NODE,
    dataclasses.replace(
        CROSS_NODE, name="cross-node ep32 +1f1b overlap", step_s=17.6, a2a_overlap=True
    ),
    ZooRun(
        name="intra-node ep8 fsdp",
        pp=1,
        vpp=1,
        dp=128,
        micro_batch_size=4,
        recompute="full",
        step_s=17.6,
        megatron_fsdp=True,
    ),
    ZooRun(name="intra-node ep8 a2a pp32", pp=32, vpp=3, dp=4, dispatcher="alltoall", step_s=24.2),
    ZooRun(name="intra-node ep8 tp4", tp=4, dp=8, recompute="none", step_s=29.0),
)
"""The table's Qwen3 235B-A22B rows, in its order (module docstring)."""

GRAPH_SCOPES = frozenset({"moe_router", "moe_preprocess"})
"""``run_h100_235b.sh``: ``--cuda-graph-impl transformer_engine --cuda-graph-scope moe_router
moe_preprocess``."""


def zoo_run_case(run: ZooRun) -> RowCase:
    """The run's `RowCase`: row `BASE_ROW`'s model with the run's columns, plan fields and
    command options (module docstring)."""
    rows, error = rows_by_ids(BASE_ROW)
    if error is not None:
        raise SystemExit(error)
    columns = {
        "tp": str(run.tp),
        "pp": str(run.pp),
        "vpp": str(run.vpp),
        "ep": str(run.ep),
        "dp": str(run.dp),
        "micro_batch_size": str(run.micro_batch_size),
        "iteration_time_s": str(run.step_s),
        "fsdp_or_zero": "Megatron-FSDP" if run.megatron_fsdp else "",
    }
    case = case_for_row(rows[0] | H100_COLUMNS | columns)
    plan = dataclasses.replace(
        case.plan,
        recompute=run.recompute,
        recompute_modules=NORM_ACT if run.recompute == "selective" else None,
        tp_comm_overlap=True,
    )
    options = dataclasses.replace(
        case.options,
        moe_dispatcher=run.dispatcher,
        moe_a2a_overlap=run.a2a_overlap,
        cuda_graph_scopes=GRAPH_SCOPES,
    )
    return dataclasses.replace(case, plan=plan, options=options)


def predict(case: RowCase) -> tuple[float, float, bool]:
    """(seconds per iteration, peak GiB, fits) of ``case``."""
    est = case_estimate(case)
    return est.iteration_time_s, est.peak_memory_gib, est.fits


def zoo_report() -> dict[str, object]:
    """Per run: plan, published and predicted seconds, signed error, peak GiB; then the
    median |error| and the Kendall tau of the predicted against the published order."""
    runs = []
    for run in RUNS:
        case = zoo_run_case(run)
        seconds, peak, fits = predict(case)
        runs.append(
            {"run": run.name, "plan": case.plan.label(), "published_s": run.step_s}
            | {"predicted_s": seconds, "error": seconds / run.step_s - 1}
            | {"peak_gib": peak, "fits": fits}
        )
    concordant, discordant, pairs = concordance(
        [(1 / r["published_s"], 1 / r["predicted_s"]) for r in runs]
    )
    return {
        "runs": runs,
        "median_abs_error": statistics.median(abs(r["error"]) for r in runs),
        "signed_median_error": statistics.median(r["error"] for r in runs),
        "kendall_tau": (concordant - discordant) / pairs,
        "pairs": pairs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    report = zoo_report()
    if args.json:
        print(json.dumps({"zoo_h100": report}, indent=1))
        return 0
    for r in report["runs"]:
        print(
            f"{r['run']:<30} {r['plan']:<58} published {r['published_s']:5.1f} s  predicted "
            f"{r['predicted_s']:6.2f} s ({100 * r['error']:+.1f}%)  peak {r['peak_gib']:.1f} GiB"
            + ("" if r["fits"] else " (does not fit)")
        )
    print(
        f"median |error| {100 * report['median_abs_error']:.1f}%, signed "
        f"{100 * report['signed_median_error']:+.1f}%, Kendall tau {report['kendall_tau']:.2f} "
        f"over {report['pairs']} pairs (a pair tied in published time counts in neither)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
