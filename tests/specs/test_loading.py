"""Tests of `--model` resolution: preset names, Hugging Face config.json files (or their
folders), paraplan ModelSpec JSON files, and the errors for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from specs import serde
from specs.errors import SpecError
from specs.hf_import import load_hf_config
from specs.loading import load_model
from specs.presets import get_preset, preset_names

HF_LLAMA = Path(__file__).parent / "fixtures" / "hf" / "Meta-Llama-3-8B" / "config.json"


@pytest.mark.parametrize("name", ["tiny", "llama3-8b", "deepseek-v3"])
def test_preset_name(name: str) -> None:
    assert load_model(name) == get_preset(name)


def test_hf_config_file_and_its_folder() -> None:
    spec = load_model(str(HF_LLAMA))
    assert spec == load_hf_config(HF_LLAMA)
    assert spec.name == "llama"  # the config's model_type: it records no name of its own
    assert load_model(str(HF_LLAMA.parent)) == spec


def test_model_spec_json(tmp_path: Path) -> None:
    spec = get_preset("tiny-moe").replace(name="my-moe", num_layers=6)
    path = tmp_path / "model.json"
    path.write_text(serde.dumps(spec))
    assert load_model(str(path)) == spec


def test_model_spec_json_with_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text(serde.dumps(get_preset("tiny")).replace('"name"', '"nme"'))
    with pytest.raises(SpecError, match="unknown key 'nme'") as info:
        load_model(str(path))
    assert str(path) in str(info.value)


def test_unknown_name_lists_presets_and_accepted_files() -> None:
    with pytest.raises(SpecError) as info:
        load_model("llama3-8")
    message = str(info.value)
    assert "did you mean 'llama3-8b'?" in message
    for name in preset_names():
        assert name in message
    assert "config.json" in message and "ModelSpec JSON" in message


def test_missing_path_says_no_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "config.json"
    with pytest.raises(SpecError, match="no file exists") as info:
        load_model(str(missing))
    assert str(missing) in str(info.value)


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n  "hidden_size": }')
    with pytest.raises(SpecError, match=r"malformed JSON at line 2") as info:
        load_model(str(path))
    assert str(path) in str(info.value)


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text("[1, 2]")
    with pytest.raises(SpecError, match="expected a JSON object"):
        load_model(str(path))


def test_hf_config_with_unsupported_type_reports_it(tmp_path: Path) -> None:
    path = tmp_path / "bert-base" / "config.json"
    path.parent.mkdir()
    path.write_text('{"model_type": "bert", "hidden_size": 768}')
    with pytest.raises(SpecError, match="model_type 'bert' is not supported"):
        load_model(str(path))


def test_a_binary_file_is_a_spec_error(tmp_path: Path) -> None:
    # a non-UTF-8 file once escaped as a UnicodeDecodeError traceback
    path = tmp_path / "model.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError, match=r"not a JSON text file .*0xff at offset 0"):
        load_model(str(path))


def test_a_folder_without_config_json_says_so(tmp_path: Path) -> None:
    # the message once listed the presets and said that no file exists at the folder
    with pytest.raises(SpecError, match=r"is a folder without a config\.json"):
        load_model(str(tmp_path))
