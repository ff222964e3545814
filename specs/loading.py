"""Resolve a `--model` argument to a `ModelSpec`.

The argument is tried, in order, as: a preset name (`specs.presets`); a path to a file,
either a Hugging Face `config.json` (recognised by its `model_type` key, imported by
`specs.hf_import`) or a paraplan ModelSpec JSON (`specs.serde`, unknown keys rejected); a
folder holding a `config.json` (a downloaded model repository). Anything else is a
`SpecError` that lists the presets and the accepted file kinds.
"""

from __future__ import annotations

from pathlib import Path

from specs.errors import SpecError, unknown_name_message
from specs.hf_import import default_model_name, model_from_hf_config
from specs.model import ModelSpec
from specs.presets import PRESETS, get_preset
from specs.serde import from_dict, read_json


def load_model(arg: str) -> ModelSpec:
    """The model named by ``arg``: a preset name, or a path to a Hugging Face config.json
    (or its folder) or to a paraplan ModelSpec JSON."""
    if arg in PRESETS:
        return get_preset(arg)
    path = Path(arg)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SpecError(
                f"--model {arg!r} is a folder without a config.json; give the folder of a "
                "downloaded Hugging Face model, or the path of its config.json or of a "
                "paraplan ModelSpec JSON"
            )
        path = path / "config.json"
    if not path.is_file():
        raise SpecError(
            unknown_name_message("model preset", arg, PRESETS)
            + "; a path to a Hugging Face config.json (or its folder) or to a paraplan "
            f"ModelSpec JSON is also accepted, and no file exists at {str(path)!r}"
        )
    return _load_model_file(path)


def _load_model_file(path: Path) -> ModelSpec:
    """A Hugging Face config.json when the JSON object has `model_type` (a key ModelSpec
    does not have), else a ModelSpec JSON."""
    data = read_json(path)
    if isinstance(data, dict) and "model_type" in data:
        return model_from_hf_config(data, name=default_model_name(path, data), source=str(path))
    # Same as serde.load, on the JSON already read.
    return from_dict(ModelSpec, data, where=str(path))
