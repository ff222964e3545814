"""Exceptions shared by every package.

`SpecError` is raised for malformed input (a bad field value, an unknown key, a missing
file). It is a `ValueError`, so callers that only care about "bad input" can catch that.
The command line turns it into a one-line message and exit code 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SpecError(ValueError):
    """Input that cannot describe a model, cluster, job or plan."""


def close_names(name: str, valid: Iterable[str], limit: int = 3) -> list[str]:
    """The valid names closest to ``name``, closest first; empty when none is close.

    The closest whole name by `difflib.get_close_matches` (ratio >= 0.6) when there is one;
    otherwise every name whose leading ``-``-separated part matches ``name`` (ratio >= 0.8,
    case and ``_``/``-`` ignored), so a short form such as ``h100`` finds ``h100-sxm-80gb``.
    At most ``limit`` names.
    """
    names = list(valid)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        return close
    key = name.lower().replace("_", "-")
    heads: dict[str, list[str]] = {}
    for full in names:
        parts = full.lower().split("-")
        for i in range(1, len(parts)):
            heads.setdefault("-".join(parts[:i]), []).append(full)
    found: list[str] = []
    for head in difflib.get_close_matches(key, list(heads), n=limit, cutoff=0.8):
        found.extend(n for n in heads[head] if n not in found)
    return found[:limit]


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` (or ``'x' or 'y'``) for the names `close_names`
    finds, or ``""``."""
    close = close_names(name, valid)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def unknown_name_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """Message for a registry or key miss that lists every valid name."""
    names = sorted(valid)
    return f"unknown {kind} {name!r}{did_you_mean(name, names)}; valid: {', '.join(names)}"
