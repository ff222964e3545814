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


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest valid name, or ``""``."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """Message for a registry or key miss that lists every valid name."""
    names = sorted(valid)
    return f"unknown {kind} {name!r}{did_you_mean(name, names)}; valid: {', '.join(names)}"
