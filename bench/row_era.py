"""The software era of a published row, read from what the row states.

A row of ``published-runs-dev.csv`` is dated (`row_date`) by, most specific first:
1. the stack versions in ``source_version``: NeMo and PyTorch containers (``NeMo YY.MM``,
   ``nvcr.io/nvidia/pytorch:YY.MM-py3``, ``PyTorch YY.MM container``: year and month of
   the container), Megatron-Core (``Megatron-Core rX.Y.Z`` / ``vX.Y``, ``core_rX.Y.Z``),
   Megatron-LM before Megatron-Core (``Megatron-LM vX.Y``) and Transformer Engine (``TE
   X.Y``, ``Transformer Engine vX.Y``), dated by their release tags
   (`bench/release_dates.py`); with several, the newest (a stack is no older than its
   newest component);
2. else the newest arXiv identifier in ``source`` or ``source_locator`` (``arXiv
   2104.04473`` is 2021-04): an upper bound, the runs predate the paper;
3. else the newest year in ``source`` (``et al. 2022``), as December of that year (also an
   upper bound).
A row with none of these has no date and runs Megatron-LM's current defaults.

The era of a date (`era_for`), each threshold a Megatron-LM merge into ``main`` or a
Transformer Engine tag (months compare; a date in the month of a change is after it):
- before `FLASH_ATTENTION_IN_MEGATRON` (2023-01, merge ``285068c810`` "Merge branch
  'tridao-flashattn' into 'main'" of 2023-01-11, bringing ``--use-flash-attn`` of
  ``d693034ecf``): ``megatron_2021``, the `MEGATRON_2021` options (materialized
  attention, local DDP, CUDA 11 cuBLAS) with the plan features that existed by then
  (`megatron_2021_features`) and the SC21 gradient reduction (`era_plan_fields`);
- from then until `FA3_IN_TRANSFORMER_ENGINE` (Transformer Engine v1.11, 2024-10-08, the
  first tag with FlashAttention-3, added by ``901e5d2b3`` "Add support for flash-attn 3",
  2024-08-23): ``flash_attention_2``, the current defaults with
  ``flash_attention_version = 2``;
- from then on: ``current``, Megatron-LM's current defaults.
Within the FlashAttention-2 era, gradient reduction is overlapped only from
`OVERLAP_GRAD_REDUCE_IN_MEGATRON` and the parameter all-gather only from
`OVERLAP_PARAM_GATHER_IN_MEGATRON` (`era_plan_fields`).

A 2023 date alone does not select `costmodel.execution_presets.MEGATRON_2023`: those options are
one commit's code (``285068c8``, the MegaScale baseline) run with its local transformer
(``--transformer-impl local``, apex layer norm, unfused bias), while Megatron-LM from
Transformer Engine's integration on ran TE layers; a row selects them by naming that
commit (`row_options.MEGATRON_2023_STACKS`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from recipe_keys import NotExpressible
from release_dates import (
    MEGATRON_CORE_RELEASES,
    MEGATRON_LM_RELEASES,
    TRANSFORMER_ENGINE_RELEASES,
)

from costmodel.execution import ExecutionOptions
from costmodel.execution_presets import DEFAULT_OPTIONS, MEGATRON_2021

Era = Literal["megatron_2021", "flash_attention_2", "current"]
"""Execution era of a row: pre-FlashAttention Megatron-LM, FlashAttention-2-class
kernels on current defaults, or Megatron-LM's current defaults."""

Month = tuple[int, int]
"""(year, month)."""

FLASH_ATTENTION_IN_MEGATRON: Month = (2023, 1)
"""``--use-flash-attn`` reaches Megatron-LM ``main``: merge ``285068c810`` of 2023-01-11
(``git log -S'use-flash-attn' -- megatron/arguments.py``: ``d693034ecf`` of 2022-12-08,
"Integrate FlashAttention into Megatron-LM")."""

FA3_IN_TRANSFORMER_ENGINE: Month = TRANSFORMER_ENGINE_RELEASES[(1, 11)]
"""Transformer Engine v1.11 (2024-10-08), the first tag whose PyTorch attention runs
FlashAttention-3 (``flashattn_hopper``, absent from v1.10)."""

SEQUENCE_PARALLEL_IN_MEGATRON: Month = (2022, 5)
"""``--sequence-parallel`` and ``--recompute-granularity selective`` reach ``main``: merge
``9aad9203aa`` "Merge branch 'sequence_parallel'" of 2022-05-20."""

DISTRIBUTED_OPTIMIZER_IN_MEGATRON: Month = (2022, 6)
"""``--use-distributed-optimizer`` reaches ``main``: merge ``d07d29df14``
"Merge branch 'lmcafee/distrib-opt-nodupe'" of 2022-06-08."""

OVERLAP_GRAD_REDUCE_IN_MEGATRON: Month = (2023, 9)
"""``--overlap-grad-reduce`` (``2d5220a424``) reaches ``main``: merge ``e801b2bb2f``
"Merge branch 'new_grad_overlap'" of 2023-09-07; before it the data-parallel reduction
followed the pipeline flush."""

OVERLAP_PARAM_GATHER_IN_MEGATRON: Month = (2023, 11)
"""``--overlap-param-gather`` (``f048bf8c08``) reaches ``main``: merge ``3b417268a2``
"Merge branch 'all_gather_overlap'" of 2023-11-17."""

TORCH_DDP_BUCKET_PARAMS = 25 * 2**20 // 2
"""PyTorch DDP's default 25 MiB bucket (`bucket_cap_mb`), in fp16 gradients."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RowDate:
    """When a row's stack dates from, and what in the row says so."""

    year: int
    month: int
    """1 to 12."""
    evidence: str
    """The matched text, e.g. ``arXiv 2104.04473``."""

    @property
    def month_key(self) -> Month:
        """(year, month), for comparison with the thresholds."""
        return (self.year, self.month)


def _text(raw: dict[str, str], key: str) -> str:
    return (raw.get(key) or "").strip()


def _container(match: re.Match[str]) -> Month:
    return (2000 + int(match.group(1)), int(match.group(2)))


def _release(
    table: dict[tuple[int, int], Month], product: str, *, open_ended: bool
) -> Callable[[re.Match[str]], Month]:
    """A lookup of the release month of the (major, minor) version a pattern matches. With
    ``open_ended`` a version newer than the table's newest dates to at least that one's
    month (Megatron-Core and Transformer Engine, whose newest tabled releases are later
    than every threshold); any other version missing from the table is NotExpressible."""

    def lookup(match: re.Match[str]) -> Month:
        version = (int(match.group(1)), int(match.group(2)))
        if version in table:
            return table[version]
        if open_ended and version > max(table):
            return table[max(table)]
        raise NotExpressible(
            f"{product} {version[0]}.{version[1]} has no release date in "
            "bench/release_dates.py; add the month of its tag there"
        )

    return lookup


_core_release = _release(MEGATRON_CORE_RELEASES, "Megatron-Core", open_ended=True)
_lm_release = _release(MEGATRON_LM_RELEASES, "Megatron-LM", open_ended=False)


def _megatron_lm_release(match: re.Match[str]) -> Month:
    """Megatron-LM ``vX.Y``: its own releases for X >= 1, Megatron-Core's numbering for
    0.Y (the repository tags ``v0.11.0`` and ``v0.15.3`` are Megatron-Core releases)."""
    return _core_release(match) if int(match.group(1)) == 0 else _lm_release(match)


STACK_PATTERNS = (
    (re.compile(r"\bNeMo(?: Framework)?[ :](\d{2})\.(\d{2})\b", re.IGNORECASE), _container),
    (re.compile(r"\bpytorch[: ](\d{2})\.(\d{2})\b", re.IGNORECASE), _container),
    (
        re.compile(r"(?:\bMegatron[- ]Core[ =]*|\bMCore |\bcore_)[rv]?(\d+)\.(\d+)", re.IGNORECASE),
        _core_release,
    ),
    (re.compile(r"\bMegatron-LM v(\d+)\.(\d+)"), _megatron_lm_release),
    (
        re.compile(r"(?:\bTE |(?i:\bTransformer[ _]Engine)[ =]*)v?(\d+)\.(\d+)"),
        _release(TRANSFORMER_ENGINE_RELEASES, "Transformer Engine", open_ended=True),
    ),
)
"""``source_version`` patterns -> month of the version each names (module docstring; also
the ``nvcr.io/nvidia/nemo:YY.MM`` container and the pip pins ``megatron-core==X.Y.Z``,
``transformer_engine==X.Y``)."""

ARXIV_ID = re.compile(r"\barXiv(?:[: ]*|\.org/(?:abs|pdf)/)(\d{2})(\d{2})\.\d{4,5}", re.IGNORECASE)
"""An arXiv identifier of the YYMM.NNNNN form (from 2007-04): ``arXiv 2104.04473``,
``arXiv:2104.04473``, ``arxiv.org/abs/2104.04473``."""

YEAR = re.compile(r"(?<![\w./-])(20[0-3]\d)(?![\w/-]|\.\d)")
"""A year 2000 to 2039 standing alone (not part of a version, path or date)."""


def _latest(dates: list[RowDate]) -> RowDate | None:
    return max(dates, key=lambda d: d.month_key) if dates else None


def _checked(year: int, month: int, evidence: str) -> RowDate:
    if not 1 <= month <= 12:
        raise NotExpressible(f"{evidence!r} names month {month}; months run 1 to 12")
    return RowDate(year=year, month=month, evidence=evidence)


def stack_date(version: str) -> RowDate | None:
    """The newest release month among the stack versions ``version`` names; None when it
    names none. NotExpressible for a version without a stored release date."""
    dates = [
        _checked(*month_of(m), m.group(0))
        for pattern, month_of in STACK_PATTERNS
        for m in pattern.finditer(version)
    ]
    return _latest(dates)


def arxiv_date(text: str) -> RowDate | None:
    """The month of the newest arXiv identifier in ``text``; None when there is none."""
    dates = [_checked(2000 + int(m[1]), int(m[2]), m[0]) for m in ARXIV_ID.finditer(text)]
    return _latest(dates)


def year_date(text: str) -> RowDate | None:
    """December of the newest standalone year in ``text`` (arXiv identifiers ignored);
    None when there is none."""
    years = [int(y) for y in YEAR.findall(ARXIV_ID.sub(" ", text))]
    return RowDate(year=max(years), month=12, evidence=str(max(years))) if years else None


def row_date(raw: dict[str, str]) -> RowDate | None:
    """The row's date, most specific evidence first (module docstring); None: undated."""
    stack = stack_date(_text(raw, "source_version"))
    if stack is not None:
        return stack
    arxiv = arxiv_date(_text(raw, "source") + " " + _text(raw, "source_locator"))
    return arxiv if arxiv is not None else year_date(_text(raw, "source"))


def era_for(date: RowDate | None) -> Era:
    """The era of a date (module docstring); ``current`` for an undated row."""
    if date is None or date.month_key >= FA3_IN_TRANSFORMER_ENGINE:
        return "current"
    if date.month_key >= FLASH_ATTENTION_IN_MEGATRON:
        return "flash_attention_2"
    return "megatron_2021"


def megatron_2021_features(date: RowDate | None) -> frozenset[str]:
    """`ExecutionOptions.plan_features` of pre-FlashAttention Megatron-LM at ``date``:
    sequence parallelism and selective recompute from `SEQUENCE_PARALLEL_IN_MEGATRON`, the
    distributed optimizer from `DISTRIBUTED_OPTIMIZER_IN_MEGATRON`; none for an undated
    row (the 2021 code of `MEGATRON_2021`)."""
    if date is None:
        return frozenset()
    features: set[str] = set()
    if date.month_key >= SEQUENCE_PARALLEL_IN_MEGATRON:
        features |= {"sequence_parallel", "selective_recompute"}
    if date.month_key >= DISTRIBUTED_OPTIMIZER_IN_MEGATRON:
        features.add("distributed_optimizer")
    return frozenset(features)


def era_options(era: Era, date: RowDate | None) -> ExecutionOptions:
    """The execution options of an era (module docstring); `MEGATRON_2021` itself while
    none of its missing plan features had arrived."""
    if era == "megatron_2021":
        features = megatron_2021_features(date)
        if not features:
            return MEGATRON_2021
        return dataclasses.replace(MEGATRON_2021, plan_features=features)
    if era == "flash_attention_2":
        return dataclasses.replace(DEFAULT_OPTIONS, flash_attention_version=2)
    return DEFAULT_OPTIONS


def era_plan_fields(
    era: Era, date: RowDate | None, pp: int, distributed_optimizer: bool
) -> dict[str, object]:
    """Gradient-reduction plan fields of an era. ``megatron_2021``: the SC21 scripts'
    (``examples/sc21/run_table_1.sh``) ``--DDP-impl torch`` (bucketed, overlapped,
    `TORCH_DDP_BUCKET_PARAMS`) for pp = 1, ``local`` (one reduction after the pipeline)
    for pipelined plans. Later eras overlap the reduction from
    `OVERLAP_GRAD_REDUCE_IN_MEGATRON` and the distributed optimizer's parameter all-gather
    from `OVERLAP_PARAM_GATHER_IN_MEGATRON` (always for an undated row)."""
    if era == "megatron_2021":
        fields: dict[str, object] = {"overlap_grad_reduce": pp == 1}
        if pp == 1:
            fields["ddp_bucket_size"] = TORCH_DDP_BUCKET_PARAMS
        return fields
    month = date.month_key if date is not None else None
    grad = month is None or month >= OVERLAP_GRAD_REDUCE_IN_MEGATRON
    param = month is None or month >= OVERLAP_PARAM_GATHER_IN_MEGATRON
    return {"overlap_grad_reduce": grad, "overlap_param_gather": distributed_optimizer and param}
