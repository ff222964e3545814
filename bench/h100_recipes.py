"""Megatron-Bridge's H100 performance recipes, priced as their published rows would be.

Every configuration of `h100_recipe_table.RECIPES` becomes, per release, the row a
Megatron-Bridge performance table of that release would print (`recipe_row`: the columns
of ``published-runs-dev.csv`` it prints, spelled as the dev set's Megatron-Bridge rows, the
model's architecture columns taken from a dev row of the same model, every figure and
unprinted field empty). That row goes through the bench's own path,
`published_rows.case_for_row` and `estimate_plan` (what `row_pricing.evaluate_row`
prices, without a published figure), so the recipe rules of `row_recipes`,
`moe_recipes` and `gpt_oss_recipes` apply as they would to a held-out row. The same row
is priced again with the recipe's full settings (`full_settings_case`: recompute, CUDA
graphs, dispatcher, all-to-all overlap, pipeline layout), and every field where the two
differ is listed (``differences``): a rule that does not cover the H100 recipe.

Per row: predicted peak GiB, whether it fits the H100 SXM profile's memory, iteration
time, model TFLOP/s per GPU and MFU (against the profile's dense peak of the job's
precision: FP8 rows against the FP8 peak), for both pricings. No published throughput is
read or printed. ``qwen3_30b_ratio`` gives the predicted time-per-token ratio of the two
16-GPU Qwen3 30B-A3B layouts (EP 16 against PP 2 VPP 12 EP 8) at the same precision.

Usage: ``python bench/h100_recipes.py [--json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys

from h100_recipe_schema import H100Recipe
from h100_recipe_table import NOT_EXPRESSIBLE, RECIPES, SKIPPED
from published_csv import rows_by_ids
from published_rows import NotExpressible, RowCase, case_for_row
from row_figures import case_estimate
from row_model import ARCHITECTURE_COLUMNS

from profiles.store import load_profile
from specs.errors import SpecError
from specs.formats import percent

MODEL_ROWS = {
    "LLAMA3_8B": "317",
    "LLAMA3_70B": "157",
    "LLAMA3.1_405B": "116",
    "DeepSeekV3": "102",
    "Qwen3_30B_a3B": "106",
    "Qwen3_235B_a22B": "108",
    "GPT OSS 120B": "104",
    "Kimi_K2": "136",
    "Nemotron_3_Nano": "279",
    "NemotronH_56B": "279",
    "Nemotron_3_Super": "279",
}
"""Dev-set Megatron-Bridge row whose architecture columns each model's rows share. The
hybrid models take a Nemotron 3 Nano row, whose architecture columns are empty: their model
name selects the preset (`hybrid_recipes.hybrid_preset`; the dev set has no Nemotron-H row,
and ``NemotronH_56B`` is this bench's spelling, not a published table's)."""

PRECISION_25_09 = {
    "bf16": "BF16",
    "fp8_cs": "not stated (25.09 page; per NeMo 25.0x convention main value = FP8 per-tensor "
    "current scaling)",
    "fp8_sc": "alternative quantization granularity (GB200/B200: MXFP8 32x32; H100: blockwise "
    "128x128 weights / 1x128 activations)",
}
"""The 25.09 page's precision column as the dev set transcribes it."""
PRECISION_25_11 = {"bf16": "BF16", "fp8_cs": "FP8-CS", "fp8_sc": "FP8-SC"}
PRECISION_LATER = {"bf16": "BF16", "fp8_cs": "FP8", "fp8_sc": "FP8-SC"}
"""26.02 onwards print current scaling as ``FP8`` (dev rows: Llama 3.1 405B FP8 is the
``*_FP8_CS_*`` config); the blockwise spelling is a guess (no dev row prints it)."""


def printed_precision(release: str, precision: str) -> str:
    """The precision column of ``release``'s table for a recipe precision."""
    if release == "25.09":
        return PRECISION_25_09[precision]
    return (PRECISION_25_11 if release == "25.11" else PRECISION_LATER)[precision]


def printed_model(recipe: H100Recipe, release: str) -> str:
    """The model column: 25.09 labels token-drop runs ``(tokendrop)``; 25.11 labels
    DeepSeek-V3 by its MTP layer (the H100 layout ends ``mL``: with MTP)."""
    if recipe.token_drop:
        return f"{recipe.model} (tokendrop)"
    if recipe.model == "DeepSeekV3" and release == "25.11":
        return "DeepSeekV3 (w/ MTP)"
    return recipe.model


def recipe_row(recipe: H100Recipe, release: str, base: dict[str, str]) -> dict[str, str]:
    """The published row ``release``'s table would print for ``recipe`` (module docstring);
    ``base`` is the dev row whose architecture columns it takes."""
    row = {key: "" for key in base}
    row |= {key: base[key] for key in ARCHITECTURE_COLUMNS}
    dp = recipe.num_gpus // (recipe.tp * recipe.pp * recipe.cp)
    fsdp = (
        f"Megatron-FSDP, sharding group = GPUs/(TP*PP)={recipe.num_gpus // (recipe.tp * recipe.pp)}"
        if recipe.megatron_fsdp
        else "DDP + distributed optimizer (FSDP=0)"
    )
    row |= {
        "row_id": f"h100:{recipe.key}@{release}",
        "source_id": f"MBRIDGE-{release}",
        "trust": "B",
        "task": "pretrain",
        "model": printed_model(recipe, release),
        "gpu_type": "H100",
        "system": "DGX-H100",
        "num_gpus": str(recipe.num_gpus),
        "seq_length": str(recipe.seq_length),
        "tp": str(recipe.tp),
        "pp": str(recipe.pp),
        "vpp": str(recipe.vpp) if recipe.vpp > 1 else "n/a",
        "cp": str(recipe.cp),
        "ep": str(recipe.ep) if base["num_experts"] or recipe.ep > 1 else "n/a",
        "dp": str(dp),
        "fsdp_or_zero": fsdp,
        "micro_batch_size": str(recipe.micro_batch_size),
        "global_batch_size": str(recipe.global_batch_size),
        "grad_accum": str(recipe.global_batch_size // (recipe.micro_batch_size * dp)),
        "precision": printed_precision(release, recipe.precision),
    }
    return row


def full_settings_case(case: RowCase, recipe: H100Recipe) -> RowCase:
    """``case`` with the recipe's own plan and option fields (`H100Recipe.plan_fields`,
    `H100Recipe.option_fields`)."""
    plan = dataclasses.replace(case.plan, **recipe.plan_fields)
    options = dataclasses.replace(case.options, **recipe.option_fields)
    return dataclasses.replace(case, plan=plan, options=options)


def differences(case: RowCase, recipe: H100Recipe) -> list[str]:
    """Every recipe field the row path prices otherwise: ``field: row -> recipe``."""
    found = []
    for owner, fields in ((case.plan, recipe.plan_fields), (case.options, recipe.option_fields)):
        for name, wanted in fields.items():
            have = getattr(owner, name)
            if have != wanted:
                found.append(f"{name}: {_show(have)} -> {_show(wanted)}")
    return found


def _show(value: object) -> str:
    if isinstance(value, frozenset):
        return "{" + ",".join(sorted(value)) + "}" if value else "{}"
    return str(value)


@functools.cache
def price(case: RowCase) -> dict[str, object]:
    """Peak GiB, fits, iteration seconds, model TFLOP/s per GPU and MFU of ``case`` (each
    distinct case priced once: releases that ship one configuration give equal cases)."""
    profile = load_profile(case.profile)
    est = case_estimate(case, profile=profile)
    return {
        "peak_gib": est.peak_memory_gib,
        "device_gib": profile.device.memory_gib,
        "fits": est.fits,
        "iteration_s": est.iteration_time_s,
        "model_tflops_per_gpu": est.model_tflops_per_gpu,
        "mfu": est.mfu,
    }


def recipe_report(recipe: H100Recipe, release: str, base: dict[str, str]) -> dict[str, object]:
    """One recipe of one release: its row, both pricings and the differences."""
    raw = recipe_row(recipe, release, base)
    entry: dict[str, object] = {
        "key": recipe.key,
        "release": release,
        "model": raw["model"],
        "precision": raw["precision"],
        "cites": recipe.cites,
    }
    try:
        case = case_for_row(raw)
    except (NotExpressible, SpecError) as err:
        return entry | {"row_path_error": str(err).splitlines()[0]}
    full = full_settings_case(case, recipe)
    entry |= {"plan": case.plan.label(), "row": dict(price(case)), "recipe": dict(price(full))}
    entry |= {"differences": differences(case, recipe), "unmodelled": list(recipe.unmodelled)}
    return entry


def qwen3_30b_ratio(entries: list[dict[str, object]]) -> list[dict[str, object]]:
    """Predicted iteration-time ratio of the EP 16 Qwen3 30B-A3B recipe (HEAD) over the
    PP 2 VPP 12 EP 8 one (25.09, 25.11 and 26.02 configs), per precision both recipes exist
    for, with each pricing (row path, full settings), per token: 25.09 and 25.11 run global
    batch 512, the others 1024."""
    by_key = {(e["key"], e["release"]): e for e in entries if "row" in e}
    ratios = []
    for precision in ("bf16", "fp8cs"):
        new = by_key.get((f"qwen3-30b-a3b-{precision}-head", "26.08"))
        for release, tokens in (("25.09", 2.0), ("25.11", 2.0), ("26.02", 1.0)):
            old = by_key.get((f"qwen3-30b-a3b-{precision}-{release}", release))
            if new is None or old is None:
                continue
            ratios.append(
                {"precision": precision, "old_release": release}
                | {
                    pricing: new[pricing]["iteration_s"] / (old[pricing]["iteration_s"] * tokens)
                    for pricing in ("row", "recipe")
                }
            )
    return ratios


def h100_report() -> dict[str, object]:
    """Every recipe of every release (module docstring), the Qwen3 30B-A3B ratio, the
    recipes not priced and the counts of fitting rows."""
    rows, error = rows_by_ids(",".join(MODEL_ROWS.values()))
    if error is not None:
        raise SystemExit(error)
    bases = dict(zip(MODEL_ROWS, rows, strict=True))
    entries = [
        recipe_report(recipe, release, bases[recipe.model])
        for recipe in RECIPES
        for release in recipe.releases
    ]
    priced = [e for e in entries if "row" in e]
    return {
        "recipes": entries,
        "num_priced": len(priced),
        "row_path_fits": sum(e["row"]["fits"] for e in priced),
        "recipe_fits": sum(e["recipe"]["fits"] for e in priced),
        "qwen3_30b_ratio": qwen3_30b_ratio(entries),
        "not_expressible": [{"model": m, "configs": c, "reason": r} for m, c, r in NOT_EXPRESSIBLE],
        "skipped": list(SKIPPED),
    }


def print_report(report: dict[str, object]) -> None:
    """The report as text lines."""
    print(
        f"{'recipe':<30} {'rel':<5} {'plan':<44} {'row GiB':>7} fit   MFU  "
        f"{'recipe GiB':>10} fit   MFU"
    )
    for e in report["recipes"]:
        if "row" not in e:
            print(f"{e['key']:<30} {e['release']:<5} not priced: {e['row_path_error']}")
            continue
        row, full = e["row"], e["recipe"]
        row_rate, full_rate = percent(row["mfu"]), percent(full["mfu"])
        print(
            f"{e['key']:<30} {e['release']:<5} {e['plan'][:44]:<44} {row['peak_gib']:7.1f} "
            f"{'yes' if row['fits'] else 'NO ':<3} {row_rate:>5}  "
            f"{full['peak_gib']:10.1f} "
            f"{'yes' if full['fits'] else 'NO ':<3} {full_rate:>5}"
        )
        for diff in e["differences"]:
            print(f"    row path differs: {diff}")
        for note in e["unmodelled"]:
            print(f"    not modelled: {note}")
    print(
        f"priced {report['num_priced']}: fit as rows {report['row_path_fits']}, "
        f"with the recipes' full settings {report['recipe_fits']}"
    )
    for r in report["qwen3_30b_ratio"]:
        print(
            f"Qwen3 30B-A3B {r['precision']}: time per token of EP16 (26.08) over PP2 VPP12 EP8 "
            f"({r['old_release']}): {r['row']:.2f} (row path), {r['recipe']:.2f} (full settings)"
        )
    for n in report["not_expressible"]:
        print(f"not expressible: {n['model']} ({n['configs']}): {n['reason']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = h100_report()
    if args.json:
        print(json.dumps({"h100_recipes": report}, indent=1, default=str))
        return 0
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
