"""Which published rows ran Transformer Engine's norms on cuDNN (`ExecutionOptions.cudnn_norm`:
``NVTE_NORM_FWD_USE_CUDNN=1`` and ``NVTE_NORM_BWD_USE_CUDNN=1``), per framework release and
recipe. In fp8 runs the backend decides how TE quantizes a ``LayerNormLinear``'s norm output
(`costmodel.fp8_quantization.norm_quantization`).

Megatron-Bridge (`MBRIDGE_KEEPS`): every release's performance launch sets both variables
(``scripts/performance/utils/executors.py`` ``PERF_ENV_VARS``, tags v0.1.0rc4, v0.2.0,
v0.3.0, v0.4.0, v0.5.0) and then removes them (``del_cudnn_ln = True``) except for the
recipes it keeps them for: ``scripts/performance/setup_experiment.py`` at v0.1.0rc4 (NeMo
25.09), ``scripts/performance/perf_plugins.py``
``PerfEnvPlugin._set_model_specific_environment_variables`` from v0.2.0 (25.11) on.
Releases by tag: 25.09 = v0.1.0rc4, 25.11 = v0.2.0 (v0.2.2 and branch llmb-r0.2.0 the
same), 26.02 = v0.3.0, 26.02.01 = v0.3.1 (branches r0.3.0, llmb-r0.3.1 the same), 26.04 =
v0.4.0, 26.04.01 = branch llmb-r0.4.1 (the same as v0.4.0), 26.06 = v0.5.0, 26.06.01 =
v0.5.1 (adds only ``vr200`` to the Blackwell list; llmb-r0.5.1 also keeps Llama 2 70B,
which no row runs). A release after 26.06.01 takes 26.06.01's rules.

NeMo 2.0 (`NEMO_SCRIPTS`, the containers of `nemo_keys.RELEASE_TAGS`): NVIDIA/NeMo
``scripts/performance/llm/pretrain_llama31_405b.py`` and ``pretrain_nemotron4_340b.py`` pass
both variables in ``custom_env_vars`` ("for properly overlapping normalization kernels with
FSDP communication"): v2.3.0 (25.04) in every run, v2.4.0 and v2.5.0rc0 (25.07, 25.09)
Llama 3.1 405B only under Megatron-FSDP (``use_mcore_fsdp``), Nemotron-4 340B always.
v2.2.0 (25.02) sets neither; no other script does.

Megatron-MoE model zoo (`ZOO_CUDNN_CONFIGS`): yanring/Megatron-MoE-ModelZoo @ e8650517,
``sbatch_benchmarking.sh`` exports each config's ``ENV_VARS``;
``model_configs/benchmarking/DeepSeek-V3.yaml``, ``Kimi-K2.yaml`` and
``Qwen3-Next-80B-A3B.yaml`` set both, ``Qwen3-235B-A22B.yaml`` has them commented out in
every version.

Other sources state no launch environment and keep TE's default (False).
"""

from __future__ import annotations

from dataclasses import dataclass

from nemo_keys import fsdp_stated, model_family, nemo_release
from recipe_keys import NotExpressible

MBRIDGE_RELEASES = ("25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01")
"""Megatron-Bridge releases in order (module docstring for their tags)."""

BLACKWELL_NVL = ("GB200", "GB300")
"""``gpu in ["gb200", "gb300"]`` of ``perf_plugins.py``; B200 and B300 are not in it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KeepRule:
    """Megatron-Bridge recipes that keep the cuDNN norm variables from release ``first`` to
    release ``last`` (inclusive; None: every later release)."""

    first: str
    last: str | None
    gpus: tuple[str, ...]
    """``gpu_type`` prefixes; empty: any GPU."""
    family: str
    """`nemo_keys.model_family` prefix."""
    task: str
    """``pretrain`` or ``sft`` (the scripts' ``train_task``); empty: any task."""
    dtypes: tuple[str, ...]
    """`compute_dtype` values (``bf16``, ``fp8_cs``, ``fp8_mx``); empty: any."""
    source: str
    """Tag and file of the rule."""


MBRIDGE_KEEPS: tuple[KeepRule, ...] = (
    KeepRule(
        first="25.09",
        last=None,
        gpus=("H100",),
        family="llama38b",
        task="pretrain",
        dtypes=("fp8_cs",),
        source="v0.1.0rc4 setup_experiment.py; v0.2.0 to v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="25.09",
        last="25.09",
        gpus=("GB200",),
        family="llama370b",
        task="pretrain",
        dtypes=("bf16", "fp8_cs"),
        source="v0.1.0rc4 setup_experiment.py (its Llama 3.1 405B test reads "
        "args.model_name == ['llama31'], never true: 405B drops them)",
    ),
    KeepRule(
        first="25.11",
        last=None,
        gpus=BLACKWELL_NVL,
        family="llama370b",
        task="pretrain",
        dtypes=("bf16", "fp8_cs"),
        source="v0.2.0 to v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="25.11",
        last=None,
        gpus=BLACKWELL_NVL,
        family="llama31405b",
        task="pretrain",
        dtypes=("fp8_cs",),
        source="v0.2.0 to v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="26.02",
        last=None,
        gpus=BLACKWELL_NVL,
        family="deepseek",
        task="",
        dtypes=("fp8_mx",),
        source="v0.3.0 to v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="26.02.01",
        last=None,
        gpus=BLACKWELL_NVL,
        family="kimi",
        task="",
        dtypes=("fp8_mx",),
        source="v0.3.1, v0.4.0, v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="26.02.01",
        last=None,
        gpus=(),
        family="llama",
        task="sft",
        dtypes=(),
        source="v0.3.1, v0.4.0, v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="26.02.01",
        last=None,
        gpus=(),
        family="nemotron3nano",
        task="",
        dtypes=(),
        source="v0.3.1, v0.4.0, v0.5.0 perf_plugins.py",
    ),
    KeepRule(
        first="26.06",
        last=None,
        gpus=BLACKWELL_NVL,
        family="gptoss20b",
        task="pretrain",
        dtypes=(),
        source="v0.5.0 perf_plugins.py",
    ),
)
"""The recipes each Megatron-Bridge release keeps ``NVTE_NORM_{FWD,BWD}_USE_CUDNN`` for
(module docstring); every other recipe runs TE's own norms."""

NEMO_SCRIPTS: tuple[tuple[str, str, bool], ...] = (
    ("25.04", "llama31405b", False),
    ("25.04", "llama3405b", False),
    ("25.04", "nemotron4340b", False),
    ("25.07", "llama31405b", True),
    ("25.07", "llama3405b", True),
    ("25.07", "nemotron4340b", False),
)
"""(first NeMo container, model family prefix, only under Megatron-FSDP) of the NeMo 2.0
scripts that set the cuDNN norm variables; a later entry of the same family replaces an
earlier one (module docstring)."""

ZOO_CUDNN_CONFIGS = ("deepseekv3", "kimik2", "qwen3next")
"""`nemo_keys.model_family` prefixes of the model zoo configs that set the variables."""


def compute_dtype(raw: dict[str, str]) -> str:
    """The Megatron-Bridge ``compute_dtype`` of a row's printed precision: ``fp8_mx`` for
    MXFP8, FP8-MX and 25.09's "alternative quantization granularity", ``fp8_cs`` for the
    other FP8 rows (FP8, FP8-CS, 25.09's "not stated" main value), ``nvfp4``, else
    ``bf16``."""
    text = (raw.get("precision") or "").strip().upper()
    if text.startswith(("MXFP8", "FP8-MX", "ALTERNATIVE")):
        return "fp8_mx"
    if text.startswith("NVFP4"):
        return "nvfp4"
    if "FP8" in text or text.startswith("NOT STATED"):
        return "fp8_cs"
    return "bf16"


def train_task(raw: dict[str, str]) -> str:
    """``sft``, ``lora`` or ``pretrain`` of the row's ``task`` column (empty, and any
    pre-training such as "continued pre-training": pretrain); NotExpressible for another
    task (DPO, RL, ...), which the cost model does not price."""
    text = (raw.get("task") or "").strip().lower()
    for task in ("sft", "lora"):
        if text.startswith(task):
            return task
    if not text or "pretrain" in text.replace("-", "").replace(" ", ""):
        return "pretrain"
    raise NotExpressible(f"task {text!r}: priced are pre-training, SFT and LoRA")


def _release_index(release: str) -> int:
    """Position of ``release`` in `MBRIDGE_RELEASES`; a later release takes the last one's."""
    if release in MBRIDGE_RELEASES:
        return MBRIDGE_RELEASES.index(release)
    if release > MBRIDGE_RELEASES[-1]:
        return len(MBRIDGE_RELEASES) - 1
    if release < MBRIDGE_RELEASES[0]:
        raise NotExpressible(
            f"Megatron-Bridge release {release!r} predates the performance scripts' cuDNN "
            f"norm rules ({MBRIDGE_RELEASES[0]} on); add its rule to bench/norm_recipes.py"
        )
    raise NotExpressible(
        f"Megatron-Bridge release {release!r} is none of those whose cuDNN norm rules are "
        f"transcribed ({', '.join(MBRIDGE_RELEASES)}); add its rule to bench/norm_recipes.py"
    )


def mbridge_keep_rule(raw: dict[str, str]) -> KeepRule | None:
    """The `MBRIDGE_KEEPS` rule that keeps a Megatron-Bridge row on the cuDNN norms; None
    for a row whose launch removes the variables."""
    at = _release_index(raw["source_id"].removeprefix("MBRIDGE-"))
    gpu = (raw.get("gpu_type") or "").strip().upper()
    family, task, dtype = model_family(raw), train_task(raw), compute_dtype(raw)
    for rule in MBRIDGE_KEEPS:
        last = len(MBRIDGE_RELEASES) if rule.last is None else _release_index(rule.last)
        if (
            _release_index(rule.first) <= at <= last
            and (not rule.gpus or gpu.startswith(rule.gpus))
            and family.startswith(rule.family)
            and (not rule.task or task == rule.task)
            and (not rule.dtypes or dtype in rule.dtypes)
        ):
            return rule
    return None


def nemo_cudnn_norm(raw: dict[str, str], release: str) -> bool:
    """Whether a NeMo 2.0 row of container ``release`` set the variables (`NEMO_SCRIPTS`)."""
    family = model_family(raw)
    rule = None
    for first, prefix, fsdp_only in NEMO_SCRIPTS:
        if release >= first and family.startswith(prefix):
            rule = fsdp_only
    return rule is not None and (not rule or fsdp_stated(raw))


def norm_backend_fields(raw: dict[str, str]) -> dict[str, object]:
    """``{"cudnn_norm": True}`` for a row whose launch ran TE's norms on cuDNN (module
    docstring); empty for the others."""
    source = raw.get("source_id") or ""
    if source.startswith("MBRIDGE-"):
        on = mbridge_keep_rule(raw) is not None
    elif source.startswith("MOEZOO-"):
        on = model_family(raw).startswith(ZOO_CUDNN_CONFIGS)
    else:
        release = nemo_release(raw)
        on = release is not None and nemo_cudnn_norm(raw, release)
    return {"cudnn_norm": True} if on else {}
