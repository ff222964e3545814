"""The dev set's trust C rows, reported apart from every figure of
`bench/validate_published.py`.

Trust C (``published-runs-dev.md``) marks a headline number, a partial configuration, a
figure read off a plot or a row that is inconsistent as published. Such a row fits nothing
and enters no statistic; it is priced here as any row is (`row_pricing.evaluate`, at
the shipped defaults) where its columns allow, and otherwise listed with the reason it
cannot be (`published_rows.NotExpressible` or the plan rule it breaks). A priced trust C
row is a check no fit has seen.
"""

from __future__ import annotations

from row_pricing import TRUSTED, evaluate


def trust_c_report(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """One entry per row of ``rows`` outside `TRUSTED` (`row_pricing.evaluate` at those
    levels): ``row_id``, ``source_id``, ``model``, ``trust`` and either ``priced`` True
    with ``plan``, ``published_s``, ``predicted_s``, ``error`` (predicted / published - 1),
    ``peak_memory_gib`` and ``fits``, or ``priced`` False with the ``reason``; the priced
    rows first."""
    trust = {raw["row_id"]: raw["trust"] for raw in rows}
    outcomes, _, apart = evaluate(rows, trusts=set(trust.values()) - set(TRUSTED))
    priced = [
        {
            "row_id": o.row_id,
            "source_id": o.source_id,
            "model": o.model,
            "trust": trust[o.row_id],
            "priced": True,
            "plan": o.plan,
            "published_s": o.published_s,
            "predicted_s": o.predicted_s,
            "error": o.error,
            "peak_memory_gib": o.peak_memory_gib,
            "fits": o.fits,
        }
        for o in outcomes
    ]
    return priced + [a | {"trust": trust[a["row_id"]], "priced": False} for a in apart]


def print_trust_c(entries: list[dict[str, object]]) -> None:
    """One line for the text output: how many trust C rows were priced, apart."""
    if not entries:
        return
    priced = sum(1 for e in entries if e["priced"])
    print(f"trust C rows (in no figure): {len(entries)}, {priced} priced")
