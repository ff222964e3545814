"""DeepSeek sparse attention in the specs: the fields' checks, the indexer layer mask, the
indexer's parameters and the GLM-5.1 / GLM-5.2 presets' counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specs.dsa_checks import computes_topk, topk_source_layer
from specs.errors import SpecError
from specs.hf_import import load_hf_config
from specs.mixer_params import dsa_indexer_params
from specs.model import ModelSpec
from specs.params import count_params
from specs.presets import get_preset

GLM51 = get_preset("glm-5.1")
GLM52 = get_preset("glm-5.2")
FIXTURE = Path(__file__).parent / "fixtures" / "hf" / "GLM-5.1"


def test_glm51_main_count_matches_the_bridge_card() -> None:
    # Megatron-Bridge v0.6.0 examples/model_verification_cards/glm5/card.yaml: the 78-layer
    # graph is 1,487,822,475,264 bf16 bytes, of which the 75 MoE layers' fp32 expert-bias
    # buffers (256 x 4 bytes) are not parameters: (1,487,822,475,264 - 75·256·4) / 2
    assert count_params(GLM51).main_total == (1_487_822_475_264 - 75 * 256 * 4) // 2


def test_glm52_main_count_matches_transformers_reload() -> None:
    # examples/model_verification_cards/glm5-2/card.yaml: "GlmMoeDsaForCausalLM with
    # 743,377,000,704 parameters"
    assert count_params(GLM52).main_total == 743_377_000_704


def test_glm52_checkpoint_elements_include_mtp_and_expert_bias() -> None:
    # glm5-2 card: 753,329,940,480 elements in the checkpoint, i.e. the trained parameters
    # (MTP depth included) plus the 76 MoE layers' 256-element expert bias
    assert count_params(GLM52).total + 76 * 256 == 753_329_940_480


def test_indexer_params_worked_by_hand() -> None:
    # GLM-5: wq_b 2048 x 32·128 = 8,388,608; wk 6144 x 128 = 786,432; k_norm 2·128 = 256;
    # weights_proj 6144 x 32 = 196,608
    assert dsa_indexer_params(GLM51) == 8_388_608 + 786_432 + 256 + 196_608 == 9_371_904


def test_glm51_and_52_differ_by_57_indexers() -> None:
    # GLM-5.2's index sharing (freq 4 from layer 3) keeps the indexer in layers 1-3 and
    # 7, 11, ..., 75: 21 of 78
    assert sum(GLM52.dsa_indexer_mask()[:78]) == 21
    difference = count_params(GLM51).main_total - count_params(GLM52).main_total
    assert difference == 57 * dsa_indexer_params(GLM51)


def test_mtp_layer_numbered_after_the_decoder() -> None:
    # layer 79: (79 - 3) % 4 == 0, it computes its top-k, so it holds an indexer
    assert GLM52.dsa_indexer_mask()[78] is True
    assert count_params(GLM52).mtp_layers[0].layers[0].indexer == dsa_indexer_params(GLM52)


@pytest.mark.parametrize(
    ("number", "computes", "source"),
    [(1, True, 1), (3, True, 3), (4, False, 3), (6, False, 3), (7, True, 7), (10, False, 7)],
)
def test_topk_sharing_follows_megatron(number: int, computes: bool, source: int) -> None:
    # Megatron-LM dsa.py is_dsa_skip_topk_layer / source_dsa_compute_layer at freq 4,
    # offset 3
    assert computes_topk(number, 4, 3) is computes
    assert topk_source_layer(number, 4, 3) == source


def test_dense_attention_has_no_indexer() -> None:
    model = get_preset("deepseek-v3")
    assert not model.uses_dsa
    assert all(layer.indexer == 0 for layer in count_params(model).layers)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dsa_indexer_topk": None}, "dsa_indexer_topk missing"),
        (
            {
                "kv_lora_rank": None,
                "qk_head_dim": None,
                "qk_pos_emb_head_dim": None,
                "v_head_dim": None,
            },
            "runs over multi-latent attention",
        ),
        ({"add_bias_linear": True}, "add_bias_linear"),
        ({"dsa_indexer_head_dim": 32}, "at least qk_pos_emb_head_dim \\(64\\)"),
        ({"dsa_indexer_topk_freq": 0}, "dsa_indexer_topk_freq \\(0\\) must be >= 1"),
        ({"dsa_indexer_loss_coeff": -1.0}, "dsa_indexer_loss_coeff \\(-1.0\\)"),
        ({"dsa_indexer_loss_coeff": 0.0}, "dsa_indexer_use_sparse_loss selects"),
    ],
)
def test_inconsistent_dsa_fields_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        GLM51.replace(**changes)


def test_dsa_settings_without_dsa_are_refused() -> None:
    with pytest.raises(SpecError, match="dsa_indexer_topk_freq apply to DeepSeek sparse"):
        get_preset("deepseek-v3").replace(dsa_indexer_topk_freq=4)


def _import_glm(tmp_path: Path, **changes: object) -> ModelSpec:
    """The GLM-5.1 fixture with ``changes``, imported."""
    data = json.loads((FIXTURE / "config.json").read_text()) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return load_hf_config(path, name="glm")


def test_glm52_index_sharing_imports_to_the_preset(tmp_path: Path) -> None:
    # GLM-5.2 adds index_topk_freq 4 and index_skip_topk_offset 3 (Megatron-Bridge
    # test_glm5_conversion.py HF_GLM52_INDEXSHARE_TOY_MODEL_CONFIG)
    spec = _import_glm(tmp_path, index_topk_freq=4, index_skip_topk_offset=3)
    assert spec.replace(name="glm-5.2") == GLM52


def test_rope_width_recovered_from_qk_head_dim(tmp_path: Path) -> None:
    # transformers may normalize qk_rope_head_dim to the head dim when loading GLM-5.2; the
    # bridge takes qk_head_dim - qk_nope_head_dim (glm5_bridge.py provider_bridge)
    spec = _import_glm(tmp_path, qk_rope_head_dim=192)
    assert spec.qk_pos_emb_head_dim == 64
