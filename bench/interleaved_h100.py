"""Large interleaved-pipeline H100 runs against the model: which part of the prediction
misses, and how the Hopper sustained GEMM factor depends on the README rows' unstated vpp.

Four tables, each a reading aid with no target (docs/benchmarks.md):

1. ``bubble``: the simulator's bubble over ideal time for uniform stages against
   Narayanan et al. 2021 (arXiv 2104.04473) §2.2, ``(p - 1)/(v·m)``, at the Nemotron-4 340B
   shape (pp 12, m 48) and Megatron-LM's schedule table
   (`costmodel.schedules.schedule_actions`).
2. ``batch_slope``: Nemotron-4 340B rows 421 (1536 GPUs, gbs 768) and 423 (6144 GPUs, gbs
   2304) run the same stage with 48 and 36 microbatches per data-parallel rank; their
   published times give a per-microbatch slope and an intercept (``t = a + b·m``) that the
   model's slope and intercept are set beside, per vpp and sustained GEMM rate factor. The
   slope is the steady-state pace of the slowest stage and does not depend on vpp; the
   intercept holds the bubble, the exposed gradient and parameter traffic and the optimizer.
3. ``hopper_fit``: the objective that fits the Hopper sustained 16-bit GEMM factor
   (`costmodel.fitted_rates.SUSTAINED_GEMM_RATE_FACTORS`, the median |log(predicted /
   published)| of the Megatron-LM README 2024 and Nemotron-4 15B rows), per factor, with
   the README's pipelined rows priced at vpp 1 (as the validation bench does), at the
   smallest vpp above 1 their layers allow, and at one layer per virtual stage.
4. ``by_vpp``: Nemotron-4 340B (rows 421-423) and Llama 3 405B (rows 395, 396; first and
   last stage one layer short, as the Llama 3 report states) per vpp and factor.

Rows are priced through `published_rows.case_for_row` with the vpp set and the factor as a
one-off `ExecutionOptions.sustained_gemm_rate_factor`; the fitted defaults are not changed.

Usage: ``python bench/interleaved_h100.py [--json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys

from published_csv import rows_by_ids
from published_rows import RowCase, case_for_row
from row_figures import case_estimate, published_iteration_time_s
from unstated_vpp import with_vpp

from costmodel.pipeline_sim import simulate_pipeline
from costmodel.schedules import Action, schedule_actions

FACTORS = (0.7, 0.75, 0.8, 0.85, 0.9)
"""Sustained 16-bit GEMM rate factors tried (the shipped Hopper value is
`costmodel.fitted_rates.SUSTAINED_GEMM_RATE_FACTORS`)."""
VPPS = (1, 2, 4, 8)
"""Virtual pipeline degrees tried on the rows that state interleaving without a degree."""
HOPPER_FIT_ROWS = "38,39,40,41,42,43,44,45,46,424,425,426"
"""The dense 16-bit H100 rows the Hopper factor is fitted on (validate_published --json,
``fitted.sustained_fitted_on_by_generation``): the README 2024 ladder and Nemotron-4 15B."""
NEMOTRON_340B_ROWS = "421,422,423"
NEMOTRON_340B_VPP = 2
"""The vpp the Nemotron-4 340B rows' batch slope and intercept point to (``batch_slope``),
at which ``hopper_fit`` adds them to the objective."""
LLAMA3_405B_ROWS = "395,396"


def row_case(raw: dict[str, str], vpp: int) -> RowCase:
    """The row's `RowCase` at ``vpp`` (`unstated_vpp.with_vpp`): what the row states, the
    Llama 3 rows' one layer fewer on the first and last stage included
    (`published_rows.stated_note_fields`)."""
    return case_for_row(with_vpp(raw, vpp))


def predicted_s(case: RowCase, factor: float | None) -> float:
    """Predicted seconds per iteration, ``factor`` overriding the sustained GEMM factor."""
    options = case.options
    if factor is not None:
        options = dataclasses.replace(options, sustained_gemm_rate_factor=factor)
    return case_estimate(case, options=options).iteration_time_s


def uniform_bubble(pp: int = 12, m: int = 48) -> list[dict[str, float]]:
    """Simulated bubble ratio of uniform stages (forward 1, backward 2 per stage) against
    ``(pp - 1)/(vpp·m)``."""
    out = []
    for vpp in (1, 2, 3, 4, 8):

        def compute_s(action: Action, vpp: int = vpp) -> float:
            return (1.0 if action.phase == "F" else 2.0) / vpp

        timing = simulate_pipeline(schedule_actions(pp, vpp, m), compute_s)
        out.append({"vpp": vpp, "simulated": timing.bubble_ratio, "textbook": (pp - 1) / (vpp * m)})
    return out


def line_through(t_a: float, t_b: float, m_a: int, m_b: int) -> tuple[float, float]:
    """(intercept, slope) of the line through (m_a, t_a) and (m_b, t_b)."""
    slope = (t_a - t_b) / (m_a - m_b)
    return t_a - slope * m_a, slope


def batch_slope() -> dict[str, object]:
    """Published and predicted ``t = a + b·m`` of rows 421 and 423 (module docstring); the
    published times are printed to 0.1 s, so the slope's range takes ±0.05 s on each."""
    rows, error = rows_by_ids("421,423")
    if error is not None:
        raise SystemExit(error)
    ms = [row_case(raw, 1).plan.num_microbatches(int(raw["global_batch_size"])) for raw in rows]
    pub = [float(raw["iteration_time_s"]) for raw in rows]
    a, b = line_through(pub[0], pub[1], ms[0], ms[1])
    low = line_through(pub[0] - 0.05, pub[1] + 0.05, ms[0], ms[1])[1]
    high = line_through(pub[0] + 0.05, pub[1] - 0.05, ms[0], ms[1])[1]
    model = []
    for factor in FACTORS:
        for vpp in VPPS:
            t = [predicted_s(row_case(raw, vpp), factor) for raw in rows]
            ma, mb = line_through(t[0], t[1], ms[0], ms[1])
            model.append({"factor": factor, "vpp": vpp, "intercept_s": ma, "slope_s": mb})
    return {
        "microbatches": ms,
        "published": {"intercept_s": a, "slope_s": b, "slope_range_s": [low, high]},
        "model": model,
    }


def readme_vpp_choices(raw: dict[str, str]) -> dict[str, int]:
    """The README assumptions for one row: vpp 1, the smallest divisor above 1 of its layers
    per stage, and one layer per virtual stage (all 1 without a pipeline)."""
    pp = int(raw["pp"] or 1)
    per_stage = int(raw["num_layers"]) // pp
    if pp == 1:
        return {"vpp1": 1, "smallest_vpp": 1, "one_layer_chunks": 1}
    smallest = next(d for d in range(2, per_stage + 1) if per_stage % d == 0)
    return {"vpp1": 1, "smallest_vpp": smallest, "one_layer_chunks": per_stage}


def _errors(rows: list[dict[str, str]], vpp_of: dict[str, int], factor: float) -> dict[str, float]:
    """Signed error (predicted / published - 1) of each row at its vpp and ``factor``."""
    errors = {}
    for raw in rows:
        case = row_case(raw, vpp_of[raw["row_id"]])
        published = published_iteration_time_s(raw, case)
        errors[raw["row_id"]] = predicted_s(case, factor) / published - 1
    return errors


def _objective(errors: list[float]) -> float:
    """Median |log(predicted / published)| (`validation_fit.fit_model`'s per-generation
    term)."""
    return statistics.median(abs(math.log1p(e)) for e in errors)


def hopper_fit(nemotron_vpp: int = NEMOTRON_340B_VPP) -> list[dict[str, object]]:
    """Per README vpp assumption and factor: the fit objective and every row's error, and
    the objective with the Nemotron-4 340B rows added at ``nemotron_vpp``."""
    rows, error = rows_by_ids(HOPPER_FIT_ROWS)
    extra, error_340b = rows_by_ids(NEMOTRON_340B_ROWS)
    if error is not None or error_340b is not None:
        raise SystemExit(error or error_340b)
    out = []
    for assumption in ("vpp1", "smallest_vpp", "one_layer_chunks"):
        vpp_of = {raw["row_id"]: readme_vpp_choices(raw)[assumption] for raw in rows}
        for factor in FACTORS:
            errors = _errors(rows, vpp_of, factor)
            nemotron = _errors(extra, {raw["row_id"]: nemotron_vpp for raw in extra}, factor)
            out.append(
                {"readme_vpp": assumption, "factor": factor}
                | {"objective": _objective(list(errors.values()))}
                | {"objective_with_340b": _objective([*errors.values(), *nemotron.values()])}
                | {"errors": errors | nemotron}
            )
    return out


def by_vpp() -> list[dict[str, object]]:
    """Nemotron-4 340B and Llama 3 405B rows: published and predicted seconds per vpp, at
    the shipped factor and at each of `FACTORS`."""
    rows, error = rows_by_ids(f"{NEMOTRON_340B_ROWS},{LLAMA3_405B_ROWS}")
    if error is not None:
        raise SystemExit(error)
    out = []
    for raw in rows:
        published = published_iteration_time_s(raw, row_case(raw, 1))
        for factor in (None, *FACTORS):
            predicted = {vpp: predicted_s(row_case(raw, vpp), factor) for vpp in VPPS}
            out.append(
                {"row_id": raw["row_id"], "model": raw["model"], "factor": factor}
                | {"published_s": published, "predicted_s": predicted}
            )
    return out


def report(result: dict[str, object]) -> str:
    """The four tables as text."""
    lines = ["bubble over ideal, uniform stages, pp 12, m 48 (simulated / (p-1)/(v m)):"]
    lines += [
        f"  vpp {r['vpp']}: {r['simulated']:.5f} / {r['textbook']:.5f}" for r in result["bubble"]
    ]
    slope = result["batch_slope"]
    pub = slope["published"]
    low, high = pub["slope_range_s"]
    lines.append(
        f"rows 421/423, m = {slope['microbatches']}: published t = {pub['intercept_s']:.2f} s + "
        f"{pub['slope_s']:.4f} s x m (slope {low:.4f}..{high:.4f} for times rounded to 0.1 s)"
    )
    for r in slope["model"]:
        lines.append(
            f"  factor {r['factor']:.2f} vpp {r['vpp']}: a {r['intercept_s']:.2f} s, "
            f"b {r['slope_s']:.4f} s"
        )
    lines.append("Hopper fit objective (median |log(pred/pub)|, rows " + HOPPER_FIT_ROWS + "):")
    for r in result["hopper_fit"]:
        errors = " ".join(f"{k}:{v:+.3f}" for k, v in r["errors"].items())
        lines.append(
            f"  README {r['readme_vpp']:<16} factor {r['factor']:.2f}: {r['objective']:.4f} "
            f"(+340B at vpp {NEMOTRON_340B_VPP}: {r['objective_with_340b']:.4f})  {errors}"
        )
    lines.append("predicted seconds per vpp (factor None: the shipped default):")
    for r in result["by_vpp"]:
        cells = " ".join(f"vpp{v} {s:6.2f}" for v, s in r["predicted_s"].items())
        lines.append(
            f"  row {r['row_id']} {r['model']:<22} factor {r['factor']!s:<4} "
            f"published {r['published_s']:6.2f}  {cells}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the tables as JSON")
    args = parser.parse_args(argv)
    result = {
        "bubble": uniform_bubble(),
        "batch_slope": batch_slope(),
        "hopper_fit": hopper_fit(),
        "by_vpp": by_vpp(),
    }
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
