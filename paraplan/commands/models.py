"""`paraplan models`: every preset with its shape and parameter counts; a hybrid model
(``hybrid_layer_pattern``) is marked with its layers by kind."""

from __future__ import annotations

import argparse
from typing import Any

from paraplan.commands import COMMAND_HELP
from paraplan.output import human_count, print_json, print_table
from specs.layer_kinds import HYBRID_SYMBOLS
from specs.model import ModelSpec
from specs.params import count_params
from specs.presets import get_preset, preset_names

NAME = "models"
HELP = COMMAND_HELP[NAME]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")


def hybrid_layers(model: ModelSpec) -> str | None:
    """A hybrid model's layers by kind, ``"24 M, 4 *, 24 -"`` (`specs.layer_kinds`
    symbols, in `HYBRID_SYMBOLS` order); None for a transformer."""
    pattern = model.hybrid_layer_pattern
    if pattern is None:
        return None
    return ", ".join(f"{pattern.count(s)} {s}" for s in HYBRID_SYMBOLS if s in pattern)


def preset_rows() -> list[dict[str, Any]]:
    """One dict per preset: its shape, total/active parameter counts, and for a hybrid model
    its pattern and layers by kind (None otherwise)."""
    rows = []
    for name in preset_names():
        model = get_preset(name)
        counts = count_params(model)
        rows.append(
            {
                "name": name,
                "num_layers": model.num_layers,
                "hidden_size": model.hidden_size,
                "num_attention_heads": model.num_attention_heads,
                "num_query_groups": model.query_groups,
                "ffn_hidden_size": model.ffn_hidden_size,
                "vocab_size": model.vocab_size,
                "num_experts": model.num_experts,
                "moe_top_k": model.moe_top_k if model.is_moe else 0,
                "params_total": counts.total,
                "params_active": counts.active,
                "hybrid_layer_pattern": model.hybrid_layer_pattern,
                "hybrid_layers": hybrid_layers(model),
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    rows = preset_rows()
    if args.json:
        print_json(rows)
        return 0
    # multi-latent attention has one compressed KV latent, no KV groups
    columns = (
        "model", "layers", "hidden", "heads", "kv groups", "experts", "total", "active", "hybrid",
    )  # fmt: skip
    table = [
        (
            r["name"],
            r["num_layers"],
            r["hidden_size"],
            r["num_attention_heads"],
            "MLA" if get_preset(r["name"]).uses_mla else r["num_query_groups"],
            f"{r['num_experts']} (top {r['moe_top_k']})" if r["num_experts"] else "-",
            human_count(r["params_total"]),
            human_count(r["params_active"]),
            r["hybrid_layers"] or "-",
        )
        for r in rows
    ]
    title = (
        "paraplan model presets (parameters: total / active per token; hybrid: layers by "
        "kind, M Mamba-2, * attention, - MLP, E experts)"
    )
    print_table(title, columns, table)
    return 0
