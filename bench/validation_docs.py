"""docs/validation.md from the published-runs validation's result
(`bench/validate_published.py --markdown`): text only, no computation of figures.

`markdown` assembles the page in this order: the header (what is priced, the command that
produced the page, the three sets of figures), the fitted figures (summary table, Kendall
tau, the fitted FP8, NVFP4 and sustained 16-bit GEMM rate factors, the same-recipe ratios,
the figure's link), the notes on what the residuals point at, then the tables of
`validation_tables`. The figures in the sentences (`fp8_line`, `fp4_line`,
`same_recipe_line`, the fit notes) are read from the result; the residual notes' other
figures are written in the text. The figure is `validation_figure`'s.
"""

from __future__ import annotations

from pathlib import Path

from validation_tables import result_tables, summary_table

COMMAND = "python bench/validate_published.py --markdown --figure --search"
"""The command that writes the page, quoted in its header."""


def markdown(result: dict) -> str:
    """The validation page of ``result`` (the bench's JSON) as Markdown."""
    lines = [*_header(), *_figures(result), *_residual_notes(result), *result_tables(result)]
    return "\n".join(lines) + "\n"


def write_markdown(result: dict, path: Path) -> None:
    """Write `markdown` to ``path``."""
    path.write_text(markdown(result))


def memory_note(result: dict) -> str:
    """The memory bullet: the rows predicted not to fit (``not_fitting``), and whether each
    prints a configuration unlike its release's recipe."""
    rows = result.get("not_fitting", [])
    if not rows:
        return "- Memory: every row is predicted to fit in its device memory."
    ids = [str(r["row_id"]) for r in rows]
    named = ", ".join(ids[:-1]) + f" and {ids[-1]}" if len(ids) > 1 else ids[0]
    if all(r.get("printed_not_recipe") for r in rows):
        return (
            f"- Memory: every row fits except {'rows' if len(ids) > 1 else 'row'} {named}, "
            "which print a configuration unlike their release's recipe (listed apart by the "
            "bench, `not_fitting`); with each priced as its recipe runs, "
            f"{result['fit_fraction_as_run']:.0%} of the rows fit."
        )
    rows_are = f"rows {named} are" if len(ids) > 1 else f"row {named} is"
    return f"- Memory: {rows_are} predicted not to fit (`not_fitting`)."


def _header() -> list[str]:
    """The title, what the rows are priced with, the command, and the three sets of figures."""
    return [
        "# Validation against published Megatron runs",
        "",
        "Every trust A and B row of `published-runs-dev.csv` that the specs can express, "
        "priced by `estimate_plan` with only what the row states (plan, precision, optimizer "
        "sharding, recompute). Error = (predicted - published) / published seconds per "
        "iteration. The DeepSpeed ZeRO-3 rows of SC21 Table 2 and the trust C rows are "
        "priced apart in their own sections below, in no figure. Produced by:",
        "",
        f"    {COMMAND}",
        "",
        "- **model**: `estimate_plan` as users get it; its fitted defaults, the FP8 GEMM "
        "rate factors (`costmodel.fitted_rates.FP8_GEMM_RATE_FACTORS`), the MoE host-launch "
        "time of a Python-level launch (`MOE_HOST_LAUNCH_S`) and of a launch Transformer "
        "Engine issues per local expert (`MOE_EXPERT_LAUNCH_S`), the MoE device time per "
        "token (`MOE_TOKEN_DEVICE_S`) and "
        "the sustained 16-bit GEMM rate factors "
        "(`costmodel.fitted_rates`), come from the rows below, so those rows are in sample "
        "here.",
        "- **fitted**: the FP8 GEMM rate factor (`ExecutionOptions.fp8_gemm_rate_factor`, "
        "one value per GPU generation of the profiles with FP8 rows, one shared by the "
        "others), the sustained 16-bit GEMM rate factor (one "
        "value per generation with dense bf16/fp16 rows, one shared by the others), the "
        "MoE host-launch times (Python-level and per expert) and the MoE device time per "
        "token, fitted jointly (in sample).",
        "- **LOSO**: leave one source family out; the parameters fitted on the other families "
        "predict it. These are the out-of-sample figures.",
        "",
    ]


def _figures(result: dict) -> list[str]:
    """The summary table, Kendall tau, the fitted rate factors, the same-recipe ratios and the
    figure's link."""
    return [
        *summary_table(result),
        "",
        f"Kendall tau over strategy groups (model): {result['kendall_tau']:.2f}; "
        f"LOSO: {result['loso']['kendall_tau']:.2f}; over {result['strategy_pairs']} pairs of "
        f"strategies in {len(result['strategy_groups'])} groups (one source release, model, "
        "cluster, sequence length and printed precision).",
        "",
        fp8_line(result),
        "",
        *(
            [fp4_line(result), ""]
            if result["fitted"].get("fp4_gemm_rate_factor_by_generation")
            else []
        ),
        _sustained_line(result),
        "",
        same_recipe_line(result),
        "",
        "![predicted vs published](validation.png)",
        "",
    ]


def _residual_notes(result: dict) -> list[str]:
    """What the residuals point at, model family by model family, then the fitted parameters
    (`_fit_notes`) and memory."""
    return [
        "What the residuals point at (per-group tables below):",
        "",
        "- GPT-OSS 120B (Megatron-Bridge, B200/B300/GB200/GB300): every row predicted too "
        "fast, by 2-51% at the shipped defaults (`bench/gpt_oss_attention.py`), with the gated "
        "experts, each release's graphs, recompute and dispatcher, the unfused YaRN RoPE and "
        "the expert FC2 bias priced; the published figures show no per-iteration fixed cost "
        "(the 25.11 B200 row runs at its recipe's EP 64 time per microbatch, not its printed "
        "EP 8's), and what is left grows with the microbatches and most where the recipe runs "
        "attention and router eagerly (GB200 publishes 1.23x GB300's time on the same plan, "
        "the model 1.02x). Not the attention backend (Transformer Engine's unfused fallback "
        "would hold 860-1,710 GiB per GPU, the cuDNN kernel with sinks runs them), nor the "
        "eager attention block's host launches (they add nothing to any row), nor the "
        "attention core (priced at full causal cost on the windowed layers too, 2 ms of one "
        "layer's 20 ms per microbatch).",
        "- Qwen3 30B-A3B and 235B-A22B: priced with the kernels alone "
        "(`bench/moe_host_share.py`), the 30B rows are 22-28% too fast at micro-batch 1 "
        "(whole layer in CUDA graphs), 4 and 8 (25.09-26.02.01 recipes), on Blackwell "
        "and Blackwell Ultra alike (about 185-255 ns per token and layer unexplained; 85-125 "
        "ns in the 26.06 recipes), and the GPU-bound 235B and DeepSeek-V3 rows leave a similar "
        "time per token unexplained whatever their hidden size. Not the Blackwell Ultra FP8 "
        "factor, not the expert GEMMs (priced below measured cuBLAS rates), not HybridEP's "
        "bandwidth, not load imbalance (the recipes force balanced routing); the model prices "
        "that time as one fitted device time per token of a MoE layer "
        f"({_token_ns(result)} ns, `MOE_TOKEN_DEVICE_S`), which leaves the 26.06 rows slow "
        '([cost-model.md](cost-model.md), "What the Qwen3 MoE rows show").',
        *_fit_notes(result),
        memory_note(result),
        "",
    ]


def _left_out_values(loso: dict[str, dict[str, float]]) -> str:
    """Per left-out source family, its refitted factors by generation, as one sentence."""
    return (
        "left-one-source-out values: "
        + "; ".join(
            f"{family} " + ", ".join(f"{g} {f}" for g, f in factors.items())
            for family, factors in loso.items()
        )
        + "."
    )


def _by_generation(fitted: dict, dtype: str) -> str:
    """``generation factor (rows ...)`` per profile generation of the ``dtype`` (``fp8`` or
    ``fp4``) GEMM rate factor of the bench's ``fitted`` JSON, joined by semicolons."""
    own = fitted.get(f"{dtype}_gemm_rate_factor_by_generation", {})
    rows = fitted.get(f"{dtype}_fitted_on_by_generation", {})
    return "; ".join(f"{g} {f} (rows {', '.join(rows.get(g, []))})" for g, f in own.items())


def fp8_line(result: dict) -> str:
    """The fitted FP8 GEMM rate factors (`costmodel.fitted_rates.FP8_GEMM_RATE_FACTORS`) by
    profile generation with their rows, the shared one, and per left-out source family."""
    fitted = result["fitted"]
    loso = result["loso"]["fp8_gemm_rate_factor_by_left_out_source"]
    return (
        "FP8 GEMM rate factor fitted per profile generation: "
        + _by_generation(fitted, "fp8")
        + f"; shared (one factor on all dense FP8 rows) {fitted['fp8_gemm_rate_factor']}; "
        + _left_out_values(loso)
    )


def fp4_line(result: dict) -> str:
    """The fitted NVFP4 GEMM rate factors (`costmodel.fitted_rates.FP4_GEMM_RATE_FACTORS`) by
    profile generation with their rows; a left-out source family without NVFP4 rows gives
    each generation its FP8 factor."""
    return (
        "NVFP4 GEMM rate factor fitted per profile generation on the dense NVFP4 rows: "
        + _by_generation(result["fitted"], "fp4")
        + "; where a left-out source family takes every NVFP4 row with it, each generation "
        "takes its FP8 factor (the cost model's default without a fit)."
    )


def same_recipe_line(result: dict) -> str:
    """Published (and predicted) tokens/s per GPU ratios of identical recipes on two GPU
    types (`bench/same_recipe.py`)."""
    ratios = result.get("same_recipe_ratios", {})
    return "Same recipe on two GPU types, tokens/s per GPU ratio (published; predicted): " + (
        "; ".join(
            f"{name} {r['median']:.2f} over {r['pairs']} recipes "
            f"({r['min']:.2f}-{r['max']:.2f}); "
            + (
                f"{r['predicted_median']:.2f}"
                if r.get("predicted_median") is not None
                else "not priced"
            )
            for name, r in ratios.items()
        )
        + "."
    )


def _sustained_line(result: dict) -> str:
    """The fitted sustained 16-bit GEMM rate factors (`costmodel.fitted_rates`), in sample and
    per left-out source family."""
    fitted = result["fitted"]
    own = fitted.get("sustained_gemm_rate_factor_by_generation", {})
    loso = result["loso"].get("sustained_gemm_rate_factor_by_left_out_source", {})
    return (
        "Sustained 16-bit GEMM rate factor fitted on the dense bf16/fp16 rows: "
        + ", ".join(f"{g} {f}" for g, f in own.items())
        + f", shared (other generations) {fitted.get('sustained_gemm_rate_factor_shared')}; "
        + _left_out_values(loso)
    )


def _token_ns(result: dict) -> str:
    """The fitted MoE device time per token of ``result`` (the bench's JSON), nanoseconds."""
    return f"{1e9 * result['fitted']['moe_token_device_s']:.0f}"


def _expert_refit(expert_s: float | None, fitted: dict) -> str:
    """The clause on the refitted per-expert launch time (`MOE_EXPERT_LAUNCH_S`) of the
    leave-one-source-out note: empty when the result has none."""
    in_sample = fitted.get("moe_expert_launch_s")
    if expert_s is None or in_sample is None:
        return ""
    return (
        f", the time of a launch Transformer Engine issues per local expert to "
        f"{1e6 * expert_s:.0f} us ({1e6 * in_sample:.0f} in sample)"
    )


def _fit_notes(result: dict) -> list[str]:
    """Residual notes on the fitted parameters and the model zoo rows, their figures read
    from ``result`` (the bench's JSON)."""
    fitted, loso = result["fitted"], result["loso"]
    own = fitted["fp8_gemm_rate_factor_by_generation"]
    left = loso["fp8_gemm_rate_factor_by_left_out_source"].get("MBRIDGE", {})
    host = loso["moe_host_launch_s_by_left_out_source"].get("MBRIDGE")
    token = loso["moe_token_device_s_by_left_out_source"].get("MBRIDGE")
    expert = loso.get("moe_expert_launch_s_by_left_out_source", {}).get("MBRIDGE")
    sustained = fitted.get("sustained_gemm_rate_factor_by_generation", {})
    megascale = loso["by_source"].get("MEGASCALE-T2", {})
    rows = {r["row_id"]: r for r in result["rows"]}
    zoo = [f"{rows[i]['error']:+.0%} (row {i})" for i in ("391", "393") if i in rows]
    notes = []
    if left and host is not None:
        notes.append(
            "- Leave-one-source-out: without the Megatron-Bridge family no dense FP8 row of "
            "Blackwell or Blackwell Ultra remains, so both take the shared factor of the remaining "
            f"dense FP8 rows ({left.get('blackwell')}, against {own.get('blackwell')} and "
            f"{own.get('blackwell_ultra')} in sample), and the model zoo's MoE rows refit the "
            f"host-launch time to {1e6 * host:.0f} us ({1e6 * fitted['moe_host_launch_s']:.0f} in "
            f"sample){_expert_refit(expert, fitted)} and the device time per token to "
            f"{1e9 * (token or 0.0):.0f} ns "
            f"({_token_ns(result)} in sample); the Megatron-Bridge rows are predicted out of "
            "sample with those values. MoE "
            "rows never set an FP8 factor alone: their residuals hold MoE costs the factor does "
            "not describe (the all-to-all overlap below, the Qwen3 device time above)."
        )
    notes += [
        "- Megatron-MoE model zoo rows run their commands' HybridEP dispatcher, attention and "
        "router graphs and, in the MXFP8 sequence-4096 commands, the 1F1B all-to-all overlap: "
        f"{', '.join(zoo)} with it. The model's overlap gain exceeds the published one "
        "(`bench/a2a_overlap.py`: the zoo's H100 ablation, the only pair that differs in the "
        "overlap alone, 0.893x published, 0.746x predicted); Megatron-LM's GB200 guide names "
        "the merged schedule's host synchronization, not priced.",
        "- FP8: one fitted factor per GPU generation absorbs Transformer Engine's cast, "
        "transpose and scaling work; Blackwell Ultra (B300, GB300) publishes faster than "
        "Blackwell on the same recipe (the same-recipe line above), which only the fitted "
        "factors carry.",
        f"- Dense bf16 rows: the sustained 16-bit factor (A100 {sustained.get('ampere')} from "
        f"the MegaScale rows, H100 {sustained.get('hopper')}) is fitted; out of sample the "
        "MegaScale rows fall back to the other families' value and are "
        f"{-megascale.get('signed_median_error', 0.0):.0%} too fast (median).",
    ]
    return notes
