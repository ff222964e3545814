"""The LoRA adapters of a published LoRA fine-tuning row (`row_lora`), from its release's
recipe: the `specs.finetune.LoraSpec` of its `TrainingJob`.

Megatron-Bridge 26.06 (tag v0.5.0; 26.06.01 = v0.5.1, the same files): the performance
configs of Llama 3 70B LoRA (``scripts/performance/configs/llama/llama3_llm_finetune.py``,
``llama3_70b_lora_config_gb300`` / ``_gb200`` / ``_b300`` / ``_b200`` / ``_h100``) start
from ``llama3_70b_peft_config(peft_scheme="lora")``
(``src/megatron/bridge/recipes/llama/llama3.py``: ``dim = 16``, ``alpha = 32``, packed
sequences of 4096 tokens) and override ``cfg.peft.target_modules = ["linear_qkv"]``. Their
parallel layouts (``llama3_workload_base_configs.py``, ``LLAMA3_70B_LORA_CONFIG_*``) are
what the rows print (tp1, pp2 vpp20 or, GB200 MXFP8, pp4 vpp20, micro-batch 1, global batch
32), and the rows keep them. The packed sequences are priced as sequences of 4096 tokens,
as the same release's SFT rows are: the recipe states the packed size, not the length of
the documents packed into it (the dataset's), so the rows set no
`TrainingJob.packed_document_tokens`.

A LoRA row of a release or model without an entry here is not expressible.
"""

from __future__ import annotations

from recipe_keys import NotExpressible, release_of, row_keys

from specs.finetune import LoraSpec

LORA_RECIPES: tuple[tuple[tuple[str, ...], str, LoraSpec], ...] = (
    (("26.06",), "llama3_70b", LoraSpec(rank=16, alpha=32, targets=("linear_qkv",))),
)
"""(Megatron-Bridge releases, model prefix, adapters) of the LoRA performance recipes
(module docstring)."""


def is_lora_row(raw: dict[str, str]) -> bool:
    """True when the row's ``task`` is LoRA fine-tuning."""
    return (raw.get("task") or "").strip().lower().startswith("lora")


def row_lora(raw: dict[str, str]) -> LoraSpec | None:
    """The adapters of a LoRA row (`LORA_RECIPES`), None for other rows; `NotExpressible`
    for a LoRA row whose recipe is not transcribed."""
    if not is_lora_row(raw):
        return None
    source = raw.get("source_id", "")
    model, _, _ = row_keys(raw)
    if source.startswith("MBRIDGE-"):
        release = release_of(source)
        for releases, prefix, lora in LORA_RECIPES:
            if release in releases and model.startswith(prefix):
                return lora
    raise NotExpressible(f"LoRA recipe of {source} {model} not transcribed (bench/lora_recipes.py)")
