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

from published_csv import rows_by_ids
from published_rows import RowCase, case_for_row
from row_figures import published_iteration_time_s
from zoo_h100 import RUNS, zoo_run_case

from costmodel.estimate import estimate_plan
from profiles.store import load_profile

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
    published = {"no_overlap": CROSS_NODE.step_s, "overlap": CROSS_NODE_OVERLAP.step_s}
    out = [overlap_entry("h100_ablation", h100, published)]
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
