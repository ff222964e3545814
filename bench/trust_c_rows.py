"""The dev set's trust C rows, reported apart from every figure of
`bench/validate_published.py`.

Trust C (``published-runs-dev.md``) marks a headline number, a partial configuration, a
figure read off a plot or a row that is inconsistent as published. Such a row fits nothing
and enters no statistic; it is priced here as any row is (`row_pricing.evaluate_row`, at
the shipped defaults) where its columns allow, and otherwise listed with the reason it
cannot be (`published_rows.NotExpressible` or the plan rule it breaks). A priced trust C
row is a check no fit has seen.
"""

from __future__ import annotations

from published_rows import NotExpressible
from row_pricing import TRUSTED, apart_reason, evaluate_row

from specs.errors import SpecError


def trust_c_report(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """One entry per row of ``rows`` outside `TRUSTED`: ``row_id``, ``source_id``,
    ``model``, ``trust`` and either ``priced`` True with ``plan``, ``published_s``,
    ``predicted_s``, ``error`` (predicted / published - 1), ``peak_memory_gib`` and
    ``fits``, or ``priced`` False with the ``reason``."""
    entries: list[dict[str, object]] = []
    for raw in rows:
        if raw["trust"] in TRUSTED:
            continue
        head = {k: raw[k] for k in ("row_id", "source_id", "model", "trust")}
        try:
            outcome, _ = evaluate_row(raw)
        except (NotExpressible, SpecError) as err:
            entries.append(head | {"priced": False, "reason": apart_reason(err)})
            continue
        entries.append(
            head
            | {
                "priced": True,
                "plan": outcome.plan,
                "published_s": outcome.published_s,
                "predicted_s": outcome.predicted_s,
                "error": outcome.error,
                "peak_memory_gib": outcome.peak_memory_gib,
                "fits": outcome.fits,
            }
        )
    return entries


def print_trust_c(entries: list[dict[str, object]]) -> None:
    """One line for the text output: how many trust C rows were priced, apart."""
    if not entries:
        return
    priced = sum(1 for e in entries if e["priced"])
    print(f"trust C rows (in no figure): {len(entries)}, {priced} priced")
