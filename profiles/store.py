"""Load and save hardware profiles: the stored ones by name, any other by path.

Stored profiles are the package data files `profiles/data/<name>.json` (located with
`importlib.resources`, so they are found in an installed wheel too). A name that is not
stored but names an existing file, or anything ending in `.json`, is read as a path.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from profiles.legacy import upgrade_profile_data
from profiles.schema import SCHEMA_VERSION, HardwareProfile
from specs import serde
from specs.errors import SpecError, did_you_mean

_DATA_PACKAGE = "profiles"
_DATA_FOLDER = "data"


def _data_dir() -> Any:
    try:
        return resources.files(_DATA_PACKAGE).joinpath(_DATA_FOLDER)
    except NotADirectoryError:
        # An editable install made while `profiles` had no __init__.py maps it as a
        # namespace package whose path holds a placeholder entry that Python 3.11's
        # importlib.resources rejects; the data still sits beside this module.
        return Path(__file__).resolve().parent / _DATA_FOLDER


def stored_profile_names() -> list[str]:
    """Names of the stored profiles (file stems of `profiles/data/*.json`), sorted."""
    return sorted(
        entry.name.removesuffix(".json")
        for entry in _data_dir().iterdir()
        if entry.name.endswith(".json")
    )


def _check_version(data: Any, where: str) -> None:
    """Refuse another schema version before key checks, whose messages would mislead."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SpecError(
            f"{where}: schema_version {version!r} is not supported (this paraplan reads "
            f"version {SCHEMA_VERSION}); regenerate it with `paraplan profile` or "
            "`python -m profiles.derive --write`"
        )


def profile_from_data(data: Any, where: str) -> HardwareProfile:
    """Build a profile from parsed JSON, checking the schema version first; a profile
    written before the typed host section is read through `profiles.legacy`."""
    _check_version(data, where)
    return serde.from_dict(HardwareProfile, upgrade_profile_data(data, where), where=where)


def load_profile(name_or_path: str) -> HardwareProfile:
    """A stored profile by name (e.g. ``h100-sxm-80gb``) or a profile JSON file by path.

    Raises `SpecError` for an unknown name (listing the stored names), an unreadable or
    malformed file, an unknown key, or another schema version.
    """
    names = stored_profile_names()
    if name_or_path in names:
        entry = _data_dir().joinpath(f"{name_or_path}.json")
        return profile_from_data(_parse(entry.read_text(), entry.name), name_or_path)
    path = Path(name_or_path)
    if path.is_file() or name_or_path.endswith(".json"):
        return profile_from_data(serde.read_json(path), str(path))
    raise SpecError(
        f"unknown hardware profile {name_or_path!r}{did_you_mean(name_or_path, names)}; "
        f"stored profiles: {', '.join(names)}; or pass a path to a profile JSON file "
        "(e.g. one written by `paraplan profile --out`)"
    )


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{where}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc


def save_profile(profile: HardwareProfile, path: str | Path) -> Path:
    """Write ``profile`` as indented JSON to ``path`` (parents created); return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(serde.dumps(profile))
    return out
