"""Which rows of ``published-runs-dev.csv`` are NeMo 2.0 performance-recipe rows, and the
NeMo container, model family, precision, GPU and Megatron-FSDP setting that the rules of
`nemo_options` and `nemo_recipes` key on.

A row of ``published-runs-dev.csv`` is a NeMo 2.0 performance-recipe row when its
``source_version`` reads "NeMo YY.MM[...] container" (or starts "NeMo YY.MM") with YY.MM at
or after 25.02 (`FIRST_RELEASE`, the first container with NeMo 2.0's performance scripts)
and its source is not Megatron-Bridge (``MBRIDGE-`` rows run Megatron-Bridge's scripts,
`bench/row_recipes.py` and `bench/moe_recipes.py`). NeMo 1.x rows (``NEMO-LONGSEQ``, "NeMo
24.03.01.framework container") are left as they are.

Containers by tag (`RELEASE_TAGS`): 25.02 = v2.2.0 (tagged 2025-03-12; its README runs
``nvcr.io/nvidia/nemo:25.02``), 25.04 = v2.3.0 (2025-05-08), 25.07 = v2.4.0 (2025-07-25),
25.09 = v2.5.0rc0 (2025-08-01, ``nemo/package_info.py`` 2.5.0rc0: the last tag of the
2.5 line in the mirror; its scripts differ from v2.4.0 only in DeepSeek-V3's recompute
modules); a later container takes the latest tag's rules.
"""

from __future__ import annotations

import re

FIRST_RELEASE = "25.02"
"""The first NeMo container with NeMo 2.0's performance scripts (v2.2.0; the scripts were
added on 2025-01-01, after v2.1.0)."""

RELEASE_TAGS = {"25.02": "v2.2.0", "25.04": "v2.3.0", "25.07": "v2.4.0", "25.09": "v2.5.0rc0"}
"""NeMo container -> NVIDIA/NeMo tag whose performance scripts it ships (module docstring)."""

_VERSION = re.compile(r"^\s*NeMo\s+(?:Framework\s+)?(\d{2})\.(\d{2})\b", re.IGNORECASE)


def nemo_release(raw: dict[str, str]) -> str | None:
    """``YY.MM`` of a NeMo 2.0 performance-recipe row (module docstring), None otherwise."""
    if (raw.get("source_id") or "").startswith("MBRIDGE-"):
        return None
    found = _VERSION.match(raw.get("source_version") or "")
    if found is None:
        return None
    release = f"{found.group(1)}.{found.group(2)}"
    return release if release >= FIRST_RELEASE else None


def model_family(raw: dict[str, str]) -> str:
    """The row's model name in lower case without spaces, dots, dashes or underscores:
    ``llama3170b`` for "Llama 3.1 70B", ``mixtral8x22b`` for "Mixtral_8x22B"."""
    return re.sub(r"[\s._\-]", "", (raw.get("model") or "").lower())


def fp8_row(raw: dict[str, str]) -> bool:
    """The row's precision names FP8 (FP8, FP8-CS, MXFP8 and the like)."""
    return "FP8" in (raw.get("precision") or "").upper()


def on_h100(raw: dict[str, str]) -> bool:
    """The row runs on H100 (the scripts' ``--gpu h100`` branches)."""
    return "H100" in (raw.get("gpu_type") or "").upper()


_FSDP_ON = re.compile(
    r"megatron[ -]fsdp|mcore[ -]fsdp|custom fsdp|fsdp\s*[=:]?\s*(1|yes|on|true)\b|^(1|yes|true|on)$"
)


def fsdp_stated(raw: dict[str, str]) -> bool:
    """True when ``fsdp_or_zero`` states Megatron-FSDP ("Megatron-FSDP", "FSDP=1", "FSDP:
    yes", or the table's flag alone, "1" / "yes"); NeMo's ``use_mcore_fsdp`` runs
    ``set_mcore_fsdp_configs``: parameters, gradients and optimizer state sharded
    (``optim_grads_params``)."""
    return _FSDP_ON.search((raw.get("fsdp_or_zero") or "").strip().lower()) is not None
