"""The MoE 1F1B all-to-all overlap (``--overlap-moe-expert-parallel-comm``) against the
published runs that show its effect: what the model says the overlap saves, beside what the
published figures say it saves.

Cases (each priced as its command runs, then again with `ExecutionOptions.moe_a2a_overlap`
off, nothing else changed):

- ``h100_ablation``: the Megatron-MoE model zoo's Qwen3 235B-A22B runs on 256 H100
  (`zoo_h100`: "Cross-node EP strategy", DeepEP, BF16, tp 2, ep 32, pp 8, vpp 4, dp 16);
  19.7 s per step, and 17.6 s with "+1f1b overlap". It is the only published pair that
  differs in the overlap alone; it is not a row of ``published-runs-dev.csv`` and no fit
  sees it.
- ``zoo_rows``: the dev set's model zoo rows whose command sets ``A2A_OVERLAP=1`` (391: GB200,
  MXFP8, pp 4 vpp 6, ep 64; 393: GB300, MXFP8, pp 1, ep 64); only the overlapped time is
  published.
- ``--rows``: every priced trust A/B dev-set row whose recipe sets the overlap
  (`overlapped_dev_rows`), grouped by how much of the step its recipe captures in CUDA graphs
  (`graph_mode`: the whole iteration, some scopes, none), with the median signed error of
  each group as priced and with the overlap off (`by_graph_mode`). Only the overlapped time
  is published for these rows.

Megatron-LM's GB200 DeepSeek-V3 guide (docs/discussions/deepseek-v3-gb200-optimization,
removed from the tree in 4c2022d6c0, read at its parent) gives the reason the measured gain
can fall short of the hidden communication: the overlap "divides the forward and backward
into multiple stages for scheduling, and there is some synchronization between different
stages, which aggravates the CPU overhead, so the overall benefit is negative on the GB200".
That host cost of the merged schedule is not priced (docs/cost-model.md, MoE layers).

Usage: ``python bench/a2a_overlap.py [--json] [--rows]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys

from published_csv import default_csv, read_rows, rows_by_ids
from published_rows import RowCase
from recipe_keys import NotExpressible
from row_figures import case_estimate, published_case
from row_pricing import TRUSTED
from zoo_h100 import RUNS, zoo_run_case

from costmodel.cuda_graph_rules import WHOLE_STEP, per_layer_graphs
from costmodel.execution import ExecutionOptions
from specs.errors import SpecError

CROSS_NODE, CROSS_NODE_OVERLAP = RUNS[0], RUNS[1]
"""The H100 table's pair that differs in the overlap alone (module docstring)."""

ZOO_OVERLAP_ROWS = "391,393"
"""Dev-set rows whose model zoo command sets ``A2A_OVERLAP=1`` (`moe_recipes.moezoo_fields`)."""


def h100_case() -> RowCase:
    """The H100 ablation's `RowCase` without the overlap (`zoo_h100.RUNS`' cross-node run,
    as `zoo_h100.zoo_run_case` builds it)."""
    return zoo_run_case(CROSS_NODE)


def predicted_s(case: RowCase, overlap: bool) -> float:
    """Predicted seconds per iteration of ``case`` with the overlap set to ``overlap``."""
    options = dataclasses.replace(case.options, moe_a2a_overlap=overlap)
    return case_estimate(case, options=options).iteration_time_s


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
    published = {"no_overlap": CROSS_NODE.step_s, "overlap": CROSS_NODE_OVERLAP.step_s}
    out = [overlap_entry("h100_ablation", h100, published)]
    rows, error = rows_by_ids(ZOO_OVERLAP_ROWS)
    if error is not None:
        raise SystemExit(error)
    for raw in rows:
        case, published = published_case(raw)
        out.append(overlap_entry(f"row {raw['row_id']}", case, {"overlap": published}))
    return out


GRAPH_MODES = (WHOLE_STEP, "partial", "eager")
"""How much of a step a recipe captures in CUDA graphs (`graph_mode`)."""


def graph_mode(options: ExecutionOptions) -> str:
    """``full_iteration`` when the whole step is one CUDA graph
    (`costmodel.cuda_graph_rules.WHOLE_STEP`: no host work inside the step), ``partial``
    when some per-layer scopes are captured (`costmodel.cuda_graph_rules.per_layer_graphs`),
    ``eager`` when none is."""
    scopes = options.cuda_graph_scopes
    if per_layer_graphs(scopes):
        return "partial"
    return WHOLE_STEP if scopes else "eager"


def overlapped_dev_rows() -> list[dict[str, object]]:
    """Every priced trust A/B row of ``published-runs-dev.csv`` whose recipe sets the
    overlap: `overlap_entry` with the row id, GPU type, `graph_mode` and the signed error
    of each prediction against the published time."""
    path = default_csv()
    if path is None:
        raise SystemExit("published-runs-dev.csv not found")
    out = []
    for raw in read_rows(path):
        if raw["trust"] not in TRUSTED:
            continue
        try:
            case, published = published_case(raw)
        except (NotExpressible, SpecError):
            continue
        if not case.options.moe_a2a_overlap:
            continue
        entry = overlap_entry(f"row {raw['row_id']}", case, {"overlap": published})
        pred = entry["predicted_s"]
        entry |= {
            "row_id": raw["row_id"],
            "gpu_type": raw["gpu_type"],
            "graph_mode": graph_mode(case.options),
            "error": {k: v / published - 1.0 for k, v in pred.items()},
        }
        out.append(entry)
    return out


def by_graph_mode(entries: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    """Per `graph_mode` with rows: their count and the median signed error of the
    prediction with the overlap (as the recipe runs) and without it."""
    out = {}
    for mode in GRAPH_MODES:
        errors = [e["error"] for e in entries if e["graph_mode"] == mode]
        if errors:
            out[mode] = {
                "rows": len(errors),
                "median_error": {
                    side: statistics.median(err[side] for err in errors)
                    for side in ("overlap", "no_overlap")
                },
            }
    return out


def _row_line(entry: dict[str, object]) -> str:
    err = entry["error"]
    return (
        f"{entry['case']:<9} {str(entry['gpu_type'])[:14]:<14} {entry['graph_mode']:<14} "
        f"{entry['plan']:<46} error {err['overlap']:+.1%} with, {err['no_overlap']:+.1%} without"
    )


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
    parser.add_argument(
        "--rows",
        action="store_true",
        help="also price every dev-set row whose recipe sets the overlap, by CUDA graph mode",
    )
    args = parser.parse_args(argv)
    report: dict[str, object] = {"a2a_overlap": overlap_report()}
    if args.rows:
        rows = overlapped_dev_rows()
        report |= {"overlapped_rows": rows, "by_graph_mode": by_graph_mode(rows)}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print("\n".join(_line(entry) for entry in report["a2a_overlap"]))
    if args.rows:
        print("\n".join(_row_line(entry) for entry in report["overlapped_rows"]))
        for mode, group in report["by_graph_mode"].items():
            med = group["median_error"]
            print(
                f"{mode}: {group['rows']} rows, median error {med['overlap']:+.1%} as priced, "
                f"{med['no_overlap']:+.1%} with the overlap off"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
