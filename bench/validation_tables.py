"""The tables of docs/validation.md, built from the published-runs validation's result
(`bench/validate_published.py --json`): text only, no computation of figures.

- `summary_table`: the model, fitted, leave-one-source-out and SC21 Table 1 figures, one line
  each (rows, median and p90 |error|, signed median, share that fits).
- `result_tables`: the sections after the prose, in page order: the Llama-3-8B memory case,
  the planner's search sanity (when the result has it, with `claim_lines`), the figures by
  GPU generation, precision, kind and source, every row, the settings rows do not state
  (`assumption_lines`), the DeepSpeed ZeRO-3 rows priced apart
  (`zero3_apart.zero3_apart_lines`), the rows not expressible yet and
  the rows whose only gap is the virtual-pipeline degree (`unstated_vpp_lines`) and the
  trust C rows (`trust_c_lines`).

Every function returns a list of Markdown lines; a section ends with an empty line.
"""

from __future__ import annotations

import re

from zero3_apart import zero3_apart_lines

GROUPINGS = ("generation", "precision", "kind", "source")
"""The result's ``by_<name>`` groupings, one table each, in page order."""


def summary_table(result: dict) -> list[str]:
    """The four summary lines of ``result`` (the bench's JSON) under their table header."""
    return [
        "| figures | rows | median \\|error\\| | signed median | p90 \\|error\\| | fits |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        _summary_line("model", result),
        _summary_line("fitted (in sample)", result["fitted"]),
        _summary_line("LOSO (out of sample)", result["loso"]),
        _summary_line("SC21 Table 1 (model)", result["sc21_table1"]),
    ]


def result_tables(result: dict) -> list[str]:
    """The sections of ``result`` (the bench's JSON) that follow the page's prose."""
    lines = _memory_case(result["memory_case_llama3_8b_h100"])
    if "search_sanity" in result:
        lines += _search_sanity(result["search_sanity"])
    for name in GROUPINGS:
        lines += _group_table(name, result[f"by_{name}"], result["loso"][f"by_{name}"])
    lines += _row_table(result["rows"])
    lines += assumption_lines(result["rows"])
    lines += zero3_apart_lines(result.get("priced_apart", {}))
    lines += _not_expressible_table(result["not_expressible"])
    if "unstated_vpp" in result:
        lines += ["", *unstated_vpp_lines(result["unstated_vpp"])]
    if "trust_c" in result:
        lines += ([] if lines[-1] == "" else [""]) + trust_c_lines(result["trust_c"])
    return lines


def _summary_line(name: str, figs: dict) -> str:
    """One table line of a summary (`validation_stats`) named ``name``; empty cells for no rows."""
    if not figs.get("num_rows"):
        return f"| {name} | 0 | | | | |"
    return (
        f"| {name} | {figs['num_rows']} | {figs['median_abs_error']:.1%} | "
        f"{figs['signed_median_error']:+.1%} | {figs['p90_abs_error']:.1%} | "
        f"{figs['fit_fraction']:.0%} |"
    )


def _group_table(title: str, section: dict, loso: dict) -> list[str]:
    """The table of one grouping, each group's summary beside its leave-one-source-out median."""
    lines = [
        f"### By {title}",
        "",
        "| group | rows | median \\|error\\| | signed median | p90 \\|error\\| | fits | "
        "LOSO median \\|error\\| |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for group, figs in section.items():
        out = loso.get(group, {})
        loso_text = f"{out['median_abs_error']:.1%}" if out.get("num_rows") else ""
        lines.append(_summary_line(group, figs) + f" {loso_text} |")
    return [*lines, ""]


def _memory_case(case: dict) -> list[str]:
    """The Llama-3-8B H100 memory case: peak GiB per rank and its parts under three option sets,
    and Megatron's own estimator."""
    parts = ("weights", "gradients", "optimizer", "activations", "output_activations", "framework")
    lines = [
        "## Memory: Llama-3-8B, sequence 8192, TP1 PP1, FP8, distributed optimizer, 8 H100",
        "",
        f"Peak GiB per rank ({case['megatron_defaults']['device_gib']:.2f} GiB device, "
        "NVML's total). Megatron-LM's defaults keep fp32 main gradients "
        "(4 bytes per parameter); Megatron-Bridge's performance scripts reduce gradients in "
        "bf16, and its H100 Llama-3-8B performance configuration "
        "(`scripts/performance`) sets context_parallel_size 2. Megatron's own estimator "
        "(`theoretical_memory_usage.py`, bf16 and dropout assumed) is given for comparison.",
        "",
        "| options | peak | " + " | ".join(parts) + " |",
        "| --- | ---: |" + " ---: |" * len(parts),
    ]
    for name in ("megatron_defaults", "megatron_bridge_perf", "megatron_bridge_perf_cp2"):
        row = case[name]
        values = " | ".join(f"{row[p]:.1f}" for p in parts)
        lines.append(f"| {name} | {row['peak_gib']:.1f} | {values} |")
    est = case["megatron_estimator"]
    lines += [
        "",
        f"Megatron's estimator: {est['peak_gib']:.1f} GiB ({est['weights_and_optimizer']:.1f} "
        f"weights, gradients and optimizer; {est['activations']:.1f} activations).",
        "",
    ]
    return lines


def _search_sanity(sanity: dict) -> list[str]:
    """The planner's pick against each trust A recipe (`bench/search_sanity.py`), with the
    sources of the claims of the recipes outside the top 10."""
    lines = [
        "## Search sanity (trust A rows)",
        "",
        "The planner's pick against the published recipe, both priced with the row's "
        "execution options (Megatron-LM 2021 for SC21-era rows, whose search keeps to the "
        "plan features that code had): claimed speedup = pick tokens/s over recipe "
        "tokens/s; rank = the recipe's place in the planner's own order of its simulated "
        "plans (fastest first, the simpler plan first within its tie band; docs/planner.md). "
        "Median claimed speedup "
        f"{sanity['median_claimed_speedup']:.2f}x; recipe within the top 10: "
        f"{sanity['recipe_in_top10_fraction']:.0%}. Held to the recipe's recompute setting: "
        f"{sanity['median_same_recompute_speedup']:.2f}x and "
        f"{sanity['same_recompute_in_top10_fraction']:.0%}.",
        "",
        _tie_sentence(sanity),
        "",
        "| row | model | recipe | pick | claimed speedup | recipe rank (within error) "
        "| pick memory free | same recompute: pick | speedup | rank (within error) |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in sanity["rows"]:
        lines.append(
            f"| {r['row_id']} | {r['model']} | {r['recipe']} | {r['pick']} | "
            f"{r['claimed_speedup']:.2f}x | {r['recipe_rank']} "
            f"({r.get('recipe_rank_within_error', '-')}) | {r['pick_memory_free']:.0%} | "
            f"{r['same_recompute_pick']} | {r['same_recompute_speedup']:.2f}x | "
            f"{r['same_recompute_rank']} ({r.get('same_recompute_rank_within_error', '-')}) |"
        )
    claims = claim_lines(sanity)
    if claims:
        lines += [
            "",
            "Where the claims of the recipes outside the top 10 come from (share of the "
            "recipe's predicted iteration the pick saves, by phase of the critical stage) and "
            "the allocator fragmentation share at which the pick would stop fitting, against "
            "the share the row's options assume (docs/planner.md, search sanity):",
            "",
            *claims,
        ]
    return [*lines, ""]


def claim_lines(sanity: dict, count: int = 3) -> list[str]:
    """One bullet per row whose recipe falls behind the planner's whole list: the ``count``
    phases that carry most of the claim (`sanity_claims.gain_by_phase`) and the pick's
    overflow fragmentation (`sanity_claims.overflow_fragmentation`); rows of a result
    without these keys are skipped."""
    out = []
    for r in sanity["rows"]:
        gains = r.get("pick_gain_by_phase")
        if gains is None or r["recipe_rank"] <= 10:
            continue
        top = sorted(gains.items(), key=lambda kv: -abs(kv[1]))[:count]
        phases = ", ".join(f"{phase} {share:+.1%}" for phase, share in top if share)
        out.append(
            f"- row {r['row_id']} ({r['model']}, {r['claimed_speedup']:.2f}x): {phases}; "
            f"stops fitting above {r['pick_overflow_fragmentation']:.0%} fragmentation "
            f"({r['assumed_fragmentation']:.0%} assumed)"
        )
    return out


def _tie_sentence(sanity: dict) -> str:
    """The ranks that count only plans beyond the tie band (`sanity_claims.TIE_TOLERANCE`),
    next to the plain ones above."""
    band = sanity.get("tie_tolerance")
    if band is None:
        return "Ranks within the model's error were not computed for this table."
    return (
        f"Rank within error (in brackets) counts only the plans predicted more than "
        f"{band:.0%} faster than the recipe, a gain inside the cost model's own error on "
        "one plan against another not being a claim: recipe within the top 10 "
        f"{sanity['recipe_in_top10_within_error_fraction']:.0%}, held to its recompute "
        f"setting {sanity['same_recompute_in_top10_within_error_fraction']:.0%}."
    )


def _row_table(rows: list[dict]) -> list[str]:
    """One table line per priced row: published and predicted seconds, in-sample and
    leave-one-source-out error, peak GiB and whether it fits."""
    lines = [
        "## Rows",
        "",
        "| row | source | model | plan | published s | predicted s | error | LOSO error | "
        "peak GiB | fits |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['row_id']} | {r['source_id']} | {r['model']} | {r['plan']} | "
            f"{r['published_s']:.3f} | {r['predicted_s']:.3f} | {r['error']:+.1%} | "
            f"{r['loso_error']:+.1%} | {r['peak_memory_gib']:.1f} | "
            f"{'yes' if r['fits'] else 'no'}{_not_fit_note(r)} |"
        )
    return lines


def assumption_lines(rows: list[dict]) -> list[str]:
    """The rows priced with a setting they do not state, each with the rule that chose it
    (the ``assumption`` of a row of the bench's JSON); none when every row states it."""
    assumed = [r for r in rows if r.get("assumption")]
    if not assumed:
        return []
    lines = ["", "## Settings the rows do not state", ""]
    lines += [f"- Row {r['row_id']} ({r['model']}): {r['assumption']}." for r in assumed]
    return lines


def _not_expressible_table(rows: list[dict]) -> list[str]:
    """The trusted rows the specs cannot express yet, each with the reason."""
    lines = ["", "## Rows not expressible yet", "", "| row | source | model | reason |"]
    lines.append("| ---: | --- | --- | --- |")
    for r in rows:
        lines.append(f"| {r['row_id']} | {r['source_id']} | {r['model']} | {r['reason']} |")
    return lines


def unstated_vpp_lines(entries: list[dict]) -> list[str]:
    """The section of the rows whose only gap is the virtual-pipeline degree
    (`bench/unstated_vpp.py`): one table line per row and sharding, each degree's predicted
    seconds, signed error and peak GiB in one cell."""
    lines = [
        "## Rows whose only gap is the virtual-pipeline degree",
        "",
        "These rows run the interleaved schedule without printing its degree, so they are "
        "in none of the figures above. Each is priced at every vpp > 1 that Megatron's rules "
        "admit for it (`specs.rules.check_plan`) with everything else as the row states it "
        "(micro-batch 1 where the row prints none: marked *mbs not stated*); a row that states "
        "optimizer state and gradients sharded with parameters kept after forward "
        "(Llama 3's FSDP) is priced with the distributed optimizer and with Megatron-FSDP "
        "`optim_grads`, and its one layer fewer on the first and last stage as Megatron's "
        "two account-for flags. Published seconds come as for every row; Llama 3's from "
        "TFLOP/s per GPU under the PaLM convention, which counts the whole attention "
        "matrix, so at sequence 131072 (row 397), where attention is most of the count, a "
        "causal count would give a shorter published time. Cells: vpp: predicted s (signed "
        "error), peak GiB.",
        "",
        "| row | model | plan | published s | sharding | per vpp | error band | any fits |",
        "| ---: | --- | --- | ---: | --- | --- | --- | --- |",
    ]
    for e in entries:
        if "not_priced" in e:
            lines.append(
                f"| {e['row_id']} | {e['model']} | | | | not priced: {e['not_priced']} | | |"
            )
            continue
        mbs = "" if e["micro_batch_size_stated"] else " (mbs not stated)"
        for sharding, figs in e["by_sharding"].items():
            results = [r for r in e["results"] if r["sharding"] == sharding]
            cells = "; ".join(
                f"{r['vpp']}: {r['predicted_s']:.2f} ({r['error']:+.1%}), "
                f"{r['peak_memory_gib']:.0f}"
                for r in results
            )
            plan = re.sub(r" vpp\d+", "", results[0]["plan"])
            lines.append(
                f"| {e['row_id']} | {e['model']} | {plan}{mbs} | {e['published_s']:.2f} | "
                f"{sharding} | {cells} | {figs['min_error']:+.1%} to {figs['max_error']:+.1%} | "
                f"{'yes' if figs['any_fits'] else 'no'} |"
            )
    device = {e.get("device_memory_gib") for e in entries if "device_memory_gib" in e}
    if device:
        sizes = ", ".join(f"{d:.1f}" for d in sorted(device))
        lines += ["", f"Device memory: {sizes} GiB."]
    return [*lines, ""]


def _not_fit_note(row: dict) -> str:
    """`` (why)`` after a non-fitting row whose printed configuration is not its recipe."""
    reason = row.get("not_fit_reason")
    return f" ({reason})" if reason else ""


def trust_c_lines(entries: list[dict[str, object]]) -> list[str]:
    """The page section of `trust_c_rows.trust_c_report`'s entries: the priced rows one
    line each, the others one line per model and reason with their row ids."""
    lines = [
        "## Trust C rows (in no figure)",
        "",
        "Headline numbers, partial configurations, figures read off plots and rows "
        "inconsistent as published (trust C, published-runs-dev.md). None is fitted or "
        "counted above; each is priced at the shipped defaults where its columns allow, "
        "else listed with the reason.",
        "",
    ]
    priced = [e for e in entries if e["priced"]]
    if priced:
        lines += [
            "| row | source | model | plan | published s | predicted s | error | fits |",
            "| ---: | --- | --- | --- | ---: | ---: | ---: | --- |",
        ]
        lines += [
            f"| {e['row_id']} | {e['source_id']} | {e['model']} | {e['plan']} | "
            f"{e['published_s']:.3f} | {e['predicted_s']:.3f} | {e['error']:+.1%} | "
            f"{'yes' if e['fits'] else 'no'} |"
            for e in priced
        ]
        lines.append("")
    groups: dict[tuple[str, str], list[dict[str, object]]] = {}
    for e in entries:
        if not e["priced"]:
            groups.setdefault((str(e["model"]), str(e["reason"])), []).append(e)
    lines += ["| rows | sources | model | not priced because |", "| --- | --- | --- | --- |"]
    for (model, reason), members in groups.items():
        ids = ", ".join(str(e["row_id"]) for e in members)
        sources = ", ".join(dict.fromkeys(str(e["source_id"]) for e in members))
        lines.append(f"| {ids} | {sources} | {model} | {reason} |")
    return lines
