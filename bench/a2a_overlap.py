"""The MoE 1F1B all-to-all overlap (``--overlap-moe-expert-parallel-comm``) against the
published runs that show its effect: what the model says the overlap saves, beside what the
published figures say it saves.

Cases (each priced as its command runs, then again with `ExecutionOptions.moe_a2a_overlap`
off, nothing else changed):

- ``h100_ablation``: the Megatron-MoE model zoo's Qwen3 235B-A22B runs on 256 H100
  (yanring/Megatron-MoE-ModelZoo ``best_practice/qwen3/readme.md`` at e8650517, "H100" table,
  "Cross-node EP strategy"): DeepEP, BF16, sequence 4096, tp 2, ep 32, etp 1, pp 8, vpp 4,
  dp 16, micro-batch 1, global batch 2048, selective recompute of the norms and the MoE
  activation; 19.7 s per step, and 17.6 s with "+1f1b overlap". The command
  (``best_practice/qwen3/run_h100_235b.sh``) captures ``moe_router`` and ``moe_preprocess``
  in CUDA graphs. It is the only published pair that differs in the overlap alone; it is not
  a row of ``published-runs-dev.csv`` and no fit sees it.
- ``zoo_rows``: the dev set's model zoo rows whose command sets ``A2A_OVERLAP=1`` (391: GB200,
  MXFP8, pp 4 vpp 6, ep 64; 393: GB300, MXFP8, pp 1, ep 64); only the overlapped time is
  published.

Megatron-LM's GB200 DeepSeek-V3 guide (docs/discussions/deepseek-v3-gb200-optimization,
removed from the tree in 4c2022d6c0, read at its parent) gives the reason the measured gain
can fall short of the hidden communication: the overlap "divides the forward and backward
into multiple stages for scheduling, and there is some synchronization between different
stages, which aggravates the CPU overhead, so the overall benefit is negative on the GB200".
That host cost of the merged schedule is not priced (docs/cost-model.md, MoE layers).

Usage: ``python bench/a2a_overlap.py [--json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from published_rows import RowCase, case_for_row, published_iteration_time_s
from validate_published import rows_by_ids

from costmodel.estimate import estimate_plan
from profiles.store import load_profile

ZOO_OVERLAP_ROWS = "391,393"
"""Dev-set rows whose model zoo command sets ``A2A_OVERLAP=1`` (`moe_recipes.moezoo_fields`)."""

H100_BASE_ROW = "390"
"""The dev-set row (the model zoo's Qwen3 235B-A22B on GB200) whose model columns the H100
ablation shares; its plan, cluster and batch columns are replaced by `H100_ABLATION`."""

H100_ABLATION: dict[str, str] = {
    "source_id": "MOEZOO-QWEN3-H100",
    "gpu_type": "H100",
    "system": "DGX H100, NVLink 4, InfiniBand 8x50 GB/s",
    "num_gpus": "256",
    "tp": "2",
    "pp": "8",
    "vpp": "4",
    "ep": "32",
    "etp": "1",
    "dp": "16",
    "micro_batch_size": "1",
    "global_batch_size": "2048",
    "sequence_parallel": "yes",
    "precision": "BF16",
    "iteration_time_s": "19.7",
    "tflops_per_gpu": "",
    "derived_fields": "",
}
"""The H100 table's row without the overlap, in ``published-runs-dev.csv`` columns (module
docstring)."""

H100_OVERLAPPED_S = 17.6
"""The same table's "+1f1b overlap" step time, seconds."""

H100_OPTIONS: dict[str, object] = {
    "moe_dispatcher": "flex",
    "cuda_graph_scopes": frozenset({"moe_router", "moe_preprocess"}),
}
"""`ExecutionOptions` fields of ``run_h100_235b.sh`` (``DISPATCHER=deepep``, the flex
dispatcher; ``--cuda-graph-scope moe_router moe_preprocess``)."""

H100_RECOMPUTE_MODULES = ("layernorm", "moe_act")
"""The table's "norm, act" selective recompute (``--recompute-modules moe_act layernorm``)."""


def h100_case() -> RowCase:
    """The H100 ablation's `RowCase` without the overlap (module docstring)."""
    rows, error = rows_by_ids(H100_BASE_ROW)
    if error is not None:
        raise SystemExit(error)
    case = case_for_row(rows[0] | H100_ABLATION)
    plan = dataclasses.replace(
        case.plan, recompute="selective", recompute_modules=H100_RECOMPUTE_MODULES
    )
    options = dataclasses.replace(case.options, moe_a2a_overlap=False, **H100_OPTIONS)
    return dataclasses.replace(case, plan=plan, options=options)


def predicted_s(case: RowCase, overlap: bool) -> float:
    """Predicted seconds per iteration of ``case`` with the overlap set to ``overlap``."""
    options = dataclasses.replace(case.options, moe_a2a_overlap=overlap)
    profile = load_profile(case.profile)
    return estimate_plan(
        case.model, case.cluster, case.job, case.plan, profile, options=options
    ).iteration_time_s


def overlap_entry(name: str, case: RowCase, published: dict[str, float]) -> dict[str, object]:
    """One case: predicted seconds with and without the overlap, the published ones given,
    and each side's overlapped / eager ratio where both are known."""
    with_s, without_s = predicted_s(case, True), predicted_s(case, False)
    entry: dict[str, object] = {
        "case": name,
        "plan": case.plan.label(),
        "predicted_s": {"overlap": with_s, "no_overlap": without_s},
        "predicted_ratio": with_s / without_s,
        "published_s": published,
    }
    if {"overlap", "no_overlap"} <= published.keys():
        entry["published_ratio"] = published["overlap"] / published["no_overlap"]
    return entry


def overlap_report() -> list[dict[str, object]]:
    """Every case of the module docstring."""
    h100 = h100_case()
    out = [
        overlap_entry(
            "h100_ablation",
            h100,
            {"no_overlap": float(H100_ABLATION["iteration_time_s"]), "overlap": H100_OVERLAPPED_S},
        )
    ]
    rows, error = rows_by_ids(ZOO_OVERLAP_ROWS)
    if error is not None:
        raise SystemExit(error)
    for raw in rows:
        case = case_for_row(raw)
        published = published_iteration_time_s(raw, case)
        out.append(overlap_entry(f"row {raw['row_id']}", case, {"overlap": published}))
    return out


def _line(entry: dict[str, object]) -> str:
    pred, pub = entry["predicted_s"], entry["published_s"]
    text = (
        f"{entry['case']:<14} {entry['plan']:<46} predicted {pred['overlap']:7.2f} s with, "
        f"{pred['no_overlap']:7.2f} s without (x{entry['predicted_ratio']:.3f}); published "
    )
    text += ", ".join(f"{k} {v:.2f} s" for k, v in pub.items())
    if "published_ratio" in entry:
        text += f" (x{entry['published_ratio']:.3f})"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the cases as JSON")
    args = parser.parse_args(argv)
    report = overlap_report()
    if args.json:
        print(json.dumps({"a2a_overlap": report}, indent=1))
    else:
        print("\n".join(_line(entry) for entry in report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
