"""Check the cost model against published Megatron runs (``published-runs-dev.csv``).

Every trust A and B row of the development set (column guide: ``published-runs-dev.md``
beside it) goes through the same `estimate_plan` a user gets, with only what the row
states (`bench/published_rows.py`: plan, precision, optimizer sharding, recompute; the
SC21-era sources keep Megatron-LM's 2021 execution options, `MEGATRON_2021`). Rows the
specs cannot express yet are listed apart with the reason; trust C rows are reported apart
(``trust_c``, `bench/trust_c_rows.py`): priced where their columns allow, in no figure; the
DeepSpeed ZeRO-3 rows are priced and reported apart with the engine costs not priced
(``priced_apart``, `bench/zero3_apart.py`), in no figure and no Kendall group.

Per row: predicted and published seconds per iteration (convention-free: the printed
time, tokens/s/GPU, or TFLOP/s/GPU through the source's own FLOPs formula), the signed
error, the predicted peak memory and whether it fits the device. Summaries
(`bench/validation_stats.py`) over all rows, by source, GPU generation, precision,
dense/MoE, and the SC21 Table 1 group; Kendall tau over strategy groups. Rows predicted
not to fit are listed apart (``not_fitting``), those printed unlike the recipe their
release ships with the reason, and ``fit_fraction_as_run`` leaves the latter out.

Four sets of figures:
- ``model``: `estimate_plan` as it is (its fitted defaults, the FP8 GEMM rate factor
  `costmodel.fitted_rates.FP8_GEMM_RATE_FACTOR`, the MoE host-launch time
  `MOE_HOST_LAUNCH_S` and the sustained 16-bit GEMM rate factors
  `costmodel.fitted_rates.SUSTAINED_GEMM_RATE_FACTORS`, were fitted on the rows here);
- ``fitted``: those parameters fitted jointly on all rows (in sample;
  `validation_fit.fit_model`, with `PER_GENERATION`);
- ``loso``: leave one source family out: the parameters fitted on the other families
  predict it. These are the out-of-sample figures.
- ``per_generation``: the same two fits with the other choice of `PER_GENERATION`, the
  evidence for that choice.

The fits key their per-generation factors by the profile's `DeviceSpec.generation`
(``fit_generation`` of each row), while the summaries group by the issue's generations
(A100, H100/H800, Blackwell with B300 and GB300). ``same_recipe_ratios``
(`bench/same_recipe.py`) gives the published tokens/s per GPU ratio of identical recipes on
two GPU types, over every row of the CSV that prints that rate (``--rows`` does not filter
it), and the cost model's ratio at the shipped defaults on the pairs it prices.
``unstated_vpp`` (`bench/unstated_vpp.py`) prices the rows whose only gap is the
virtual-pipeline degree at every degree Megatron admits, apart from every statistic above.

The dev set is read by `bench/published_csv.py`, the rows priced by `bench/row_pricing.py`
and the JSON assembled by `bench/validation_report.py`; this script holds the command line
and the text output.

Usage: ``python bench/validate_published.py [--json] [--markdown] [--figure] [--csv PATH]
[--host-launch-us US] [--expert-launch-us US]`` (``--markdown`` writes docs/validation.md and
the table ``paraplan/data/published_accuracy.json``, `write_markdown_outputs`; ``--figure``
docs/validation.png; ``--host-launch-us`` fixes the MoE host-launch time of a Python-level
launch instead of fitting it, ``--expert-launch-us`` that of a launch Transformer Engine
issues per local expert, `fit_grid`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from accuracy_table import DEFAULT_OUT as ACCURACY_TABLE
from accuracy_table import write_table
from published_csv import TRUST_LEVELS, default_csv, header_problem, read_rows, select_rows
from row_pricing import at_host_launch, evaluate, fit_grid, row_predictor
from same_recipe import same_recipe_ratios, with_predictions
from trust_c_rows import print_trust_c, trust_c_report
from unstated_vpp import print_unstated_vpp, unstated_vpp_report
from validation_docs import write_markdown
from validation_fit import Progress
from validation_report import defaults_report, report
from validation_stats import Outcome
from zero3_apart import print_zero3_apart, split_apart, zero3_apart_report

from costmodel.fitted_rates import MOE_HOST_LAUNCH_S

DOCS = Path(__file__).resolve().parents[1] / "docs"


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring): 0 after printing the figures, 2 when the CSV is
    missing or its header cannot be read (`published_csv.header_problem`)."""
    args = build_parser().parse_args(argv)
    if args.csv is None or not args.csv.is_file():
        print(f"published-runs CSV not found ({args.csv}); pass --csv PATH", file=sys.stderr)
        return 2
    problem = header_problem(args.csv, args.trust)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    result, outcomes = figures(args)
    if args.markdown:
        write_markdown_outputs(result)
    if args.figure:
        from validation_figure import write_figure

        write_figure(outcomes, DOCS / "validation.png")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_table(result)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The arguments of the command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="write docs/validation.md and paraplan/data/published_accuracy.json",
    )
    parser.add_argument("--figure", action="store_true", help="write docs/validation.png")
    parser.add_argument(
        "--search", action="store_true", help="add the planner's search sanity (trust A rows)"
    )
    parser.add_argument("--csv", type=Path, default=default_csv(), help="published-runs CSV")
    parser.add_argument(
        "--trust",
        choices=TRUST_LEVELS,
        default=None,
        help="trust level of every row of a CSV without a trust column (A and B rows enter "
        "the figures, C rows are priced apart)",
    )
    parser.add_argument(
        "--rows",
        default="",
        help="only the rows whose source id, model or row id contains one of these "
        "comma-separated texts (case-insensitive)",
    )
    parser.add_argument(
        "--no-fit",
        action="store_true",
        help="price the rows with the shipped defaults only: no fitted or leave-one-source-out "
        "sections (a quick look at a change)",
    )
    parser.add_argument(
        "--host-launch-us",
        type=float,
        default=None,
        help="fix the MoE host-launch time at this many microseconds: --no-fit prices the MoE "
        "rows with it, the fits take it as an input instead of fitting it",
    )
    parser.add_argument(
        "--expert-launch-us",
        type=float,
        default=None,
        help="fix the host time of a launch Transformer Engine issues per local expert at this "
        "many microseconds, as --host-launch-us does the Python-level launch time",
    )
    return parser


def figures(args: argparse.Namespace) -> tuple[dict, list[Outcome]]:
    """(the report `main` prints, the outcomes of the rows in the figures) for the parsed
    ``args``: the selected rows priced (`row_pricing.evaluate`), the DeepSpeed ZeRO-3 rows
    set apart (`zero3_apart.split_apart`), the shipped defaults' figures under ``--no-fit``
    (`validation_report.defaults_report`, the MoE rows at the fixed launch times when given:
    `row_pricing.at_host_launch`) or else the fits (`validation_report.report` on
    `row_pricing.fit_grid`), with the sections apart: ``same_recipe_ratios``,
    ``unstated_vpp``, ``trust_c``, ``priced_apart`` and, with ``--search``,
    ``search_sanity``."""
    selected = select_rows(read_rows(args.csv, args.trust), args.rows)
    outcomes, cases, apart = evaluate(selected)
    outcomes, priced_apart = split_apart(outcomes)
    host_s = None if args.host_launch_us is None else args.host_launch_us * 1e-6
    expert_s = None if args.expert_launch_us is None else args.expert_launch_us * 1e-6
    if args.no_fit:
        if host_s is not None or expert_s is not None:
            python_s = MOE_HOST_LAUNCH_S if host_s is None else host_s
            outcomes = at_host_launch(outcomes, row_predictor(cases), python_s, expert_s)
        result = defaults_report(outcomes, apart)
    else:
        grid = fit_grid(host_s, expert_s)
        result = report(outcomes, apart, row_predictor(cases), grid, stderr_progress())
    result["same_recipe_ratios"] = with_predictions(
        same_recipe_ratios(read_rows(args.csv, args.trust)),
        {o.row_id: o.predicted_s for o in outcomes},
    )
    result["unstated_vpp"] = unstated_vpp_report(selected)
    result["trust_c"] = trust_c_report(selected)
    result["priced_apart"] = zero3_apart_report(outcomes, priced_apart)
    if args.search:
        from search_sanity import search_sanity

        result["search_sanity"] = search_sanity(read_rows(args.csv, args.trust))
    return result, outcomes


def write_markdown_outputs(result: dict, docs: Path = DOCS, table: Path = ACCURACY_TABLE) -> None:
    """What ``--markdown`` writes, both from the one ``result``: the validation page
    (``docs``/validation.md, `validation_docs.write_markdown`) and the published-accuracy
    table that `paraplan estimate` and `paraplan plan` print from (``table``,
    `accuracy_table.write_table`), so the page and the table stay in step."""
    write_markdown(result, docs / "validation.md")
    write_table(result, table)


def stderr_progress() -> Progress:
    """A `validation_fit.Progress` that prints each line to stderr with the seconds since
    it was made: the fits take minutes each."""
    start = time.perf_counter()

    def progress(line: str) -> None:
        print(f"{line}: {time.perf_counter() - start:.0f} s in all", file=sys.stderr, flush=True)

    return progress


def print_table(result: dict) -> None:
    """Per-row lines and the three summaries, as text."""
    print(
        f"{'row':>4} {'source':<18} {'model':<22} {'plan':<34} {'pub s':>8} {'pred s':>8} "
        f"{'error':>7} {'loso':>7} {'GiB':>5} fits"
    )
    for r in result["rows"]:
        print(
            f"{r['row_id']:>4} {r['source_id']:<18} {r['model'][:22]:<22} {r['plan'][:34]:<34} "
            f"{r['published_s']:>8.3f} {r['predicted_s']:>8.3f} {r['error']:>+7.1%} "
            f"{r['loso_error']:>+7.1%} {r['peak_memory_gib']:>5.0f} {r['fits']}"
        )
    for r in result["rows"]:
        if r.get("assumption"):
            print(f"assumed: row {r['row_id']} {r['model'][:22]}: {r['assumption']}")
    for name in ("model", "fitted", "loso"):
        if name != "model" and name not in result:
            continue
        figs = result if name == "model" else result[name]
        tau = figs["kendall_tau"]
        tau_text = "n/a (no group of two strategies)" if math.isnan(tau) else f"{tau:.2f}"
        print(
            f"{name:>6}: rows {figs['num_rows']}, median |error| {figs['median_abs_error']:.1%}, "
            f"signed median {figs['signed_median_error']:+.1%}, p90 {figs['p90_abs_error']:.1%}, "
            f"fit {figs['fit_fraction']:.0%}, Kendall tau {tau_text}"
        )
    for r in result["not_fitting"]:
        reason = r["printed_not_recipe"]
        print(
            f"not fitting: row {r['row_id']} {r['model'][:22]} {r['plan']}: "
            f"{r['peak_memory_gib']:.1f} of {r['device_memory_gib']:.1f} GiB"
            + (f"; printed unlike its recipe: {reason}" if reason else "")
        )
    print(f"fit fraction of the rows printed as run: {result['fit_fraction_as_run']:.0%}")
    print(f"not expressible yet: {len(result['not_expressible'])} trusted rows")
    print_unstated_vpp(result.get("unstated_vpp", []))
    print_trust_c(result.get("trust_c", []))
    print_zero3_apart(result.get("priced_apart"))
    sanity = result.get("search_sanity")
    if sanity:
        for r in sanity["rows"]:
            print(
                f"search {r['row_id']:>4} {r['model'][:22]:<22} recipe {r['recipe']:<34} "
                f"pick {r['pick']:<34} speedup {r['claimed_speedup']:.2f}x rank {r['recipe_rank']} "
                f"free {r['pick_memory_free']:.0%}; same recompute "
                f"{r['same_recompute_speedup']:.2f}x rank {r['same_recompute_rank']}"
            )
        print(
            f"search sanity: median claimed speedup {sanity['median_claimed_speedup']:.2f}x, "
            f"recipe in top 10: {sanity['recipe_in_top10_fraction']:.0%}; held to the "
            f"recipe's recompute: {sanity['median_same_recompute_speedup']:.2f}x, "
            f"{sanity['same_recompute_in_top10_fraction']:.0%}; counting only plans more than "
            f"{sanity['tie_tolerance']:.0%} faster: "
            f"{sanity['recipe_in_top10_within_error_fraction']:.0%} and "
            f"{sanity['same_recompute_in_top10_within_error_fraction']:.0%}"
        )


if __name__ == "__main__":
    sys.exit(main())
