"""The installed paraplan version, recorded in what paraplan writes (profiles) and checked
when it reuses them (`paraplan demo`'s profile cache)."""

from __future__ import annotations

import importlib.metadata


def paraplan_version() -> str | None:
    """The installed distribution's version; None when paraplan runs from a tree that was
    never installed."""
    try:
        return importlib.metadata.version("paraplan")
    except importlib.metadata.PackageNotFoundError:
        return None
