"""The command line of `search_sanity.py`: its argument parser and its text output (one
block per recipe, then the summary lines over all recipes and per group).

`main_phases` names the phases that carry most of a claim (`sanity_claims.gain_by_phase`);
a claim above `CLAIM_DETAIL` lists every phase.
"""

from __future__ import annotations

import argparse

from sanity_problems import KINDS


def main_phases(gains: dict[str, float], count: int = 3) -> str:
    """The ``count`` phases with the largest shares of `gain_by_phase`, as text."""
    top = sorted(gains.items(), key=lambda kv: -abs(kv[1]))[:count]
    return ", ".join(f"{phase} {share:+.0%}" for phase, share in top if share)


CLAIM_DETAIL = 1.10
"""Claimed speedup above which the text output lists every phase of `gain_by_phase`."""


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python bench/search_sanity.py``."""
    parser = argparse.ArgumentParser(
        description="Search sanity: the planner's pick against every published recipe of the "
        "chosen trust levels with a complete configuration, each distinct problem searched once."
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--rows",
        default="",
        help="only the rows whose source id, model or row id contains one of these "
        "comma-separated texts (case-insensitive); rows of the --trust levels only either way",
    )
    parser.add_argument(
        "--trust",
        default="A",
        help="trust levels of the rows, comma-separated (default A: the SC21 rows; A,B adds "
        "the production recipes)",
    )
    parser.add_argument(
        "--kinds", choices=KINDS, default="all", help="rows of dense models, MoE models or both"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="search only the first N distinct problems"
    )
    parser.add_argument(
        "--recipe-vpp",
        type=int,
        default=1,
        help="price pipelined recipes published without interleaving with this many model "
        "chunks per pipeline rank (1: as published)",
    )
    return parser


def print_recipe(r: dict) -> None:
    """One recipe's block: claim, ranks, both plans, memory headroom and where the gain is."""
    print(
        f"{','.join(r['row_ids'])} {r['model']} on {r['num_gpus']} {r['hardware']}: "
        f"{r['claimed_speedup']:.2f}x rank {r['recipe_rank']} ({r['recipe_rank_within_error']} "
        f"within error); held to its recompute {r['same_recompute_speedup']:.2f}x rank "
        f"{r['same_recompute_rank']} ({r['same_recompute_rank_within_error']})\n"
        f"    recipe {r['recipe']}\n    pick   {r['pick']}\n"
        f"    free {r['pick_memory_free']:.0%}, overflow at fragmentation "
        f"{r['pick_overflow_fragmentation']:.0%} ({r['assumed_fragmentation']:.0%} assumed); "
        f"gain: {main_phases(r['pick_gain_by_phase'])}"
    )
    if r["claimed_speedup"] > CLAIM_DETAIL:
        print(f"    gain by phase: {main_phases(r['pick_gain_by_phase'], count=99)}")


def summary_line(name: str, s: dict) -> str:
    """One summary (`sanity_problems.summary`) of the recipes of a group, as a line."""
    return (
        f"{name}: {s['num_recipes']} recipes, median claimed speedup "
        f"{s['median_claimed_speedup']:.2f}x, recipe in top 10 {s['recipe_in_top10_fraction']:.0%} "
        f"({s['recipe_in_top10_within_error_fraction']:.0%} within error); held to the "
        f"recipe's recompute {s['median_same_recompute_speedup']:.2f}x, "
        f"{s['same_recompute_in_top10_fraction']:.0%}"
    )


def print_result(result: dict) -> None:
    """The text output of a `search_sanity.search_sanity` result: one block per recipe, then
    the counts and the summary lines over all recipes and per group."""
    for r in result["rows"]:
        print_recipe(r)
    if not result["rows"]:
        print("no recipe with a complete configuration among the selected rows")
        return
    print(
        f"{len(result['rows'])} recipes of {result['num_problems']} distinct problems, "
        f"{result['num_searches']} searches"
    )
    print(summary_line("all", result))
    for name, group in result["by_group"].items():
        print(summary_line(name, group))
