"""Megatron-LM's pipeline layout grammar (`PipelineParallelLayerLayout.parse_str_to_list`):
one string of layer symbols per virtual stage, stages separated by ``|``, in virtual stage
order (chunk-major: stage ``c·pp + r`` is chunk c of rank r).

Symbols: ``E`` embedding, ``t`` transformer layer, ``m`` MTP layer (one MTP depth, all
its layers: a hybrid model's ``mtp_hybrid_pattern``), ``L`` loss;
``(group)*n`` and ``x*n`` repeat; commas are cosmetic. Example: ``Et|(tt|)*30mL`` is 32
stages: E and one layer, thirty stages of two layers, then an MTP layer and the loss.
"""

from __future__ import annotations

import functools
import re

from specs.errors import SpecError

LAYOUT_SYMBOLS = {"E": "embedding", "L": "loss", "t": "transformer layer", "m": "MTP layer"}
"""Megatron's layout characters (`PipelineParallelLayerLayout.parse_str_to_list`)."""

_GROUP_REPEAT = re.compile(r"\(([^)]+)\)\*(\d+)")
_CHAR_REPEAT = re.compile(r"(.)\*(\d+)")

MAX_LAYOUT_CHARS = 1 << 16
"""Longest expanded layout read: one symbol per layer, embedding and loss and one ``|`` per
stage boundary stay far below it (the largest preset has 128 layers). A repeat count past it
(``t*999999999999``) is refused before the string is built, which Megatron-LM's
`parse_str_to_list` would attempt."""


def require_layout_text(layout: str | None) -> None:
    """A layout, when given, holds at least one character besides commas and blanks: an
    empty string is no layout of one stage (Megatron-LM's `parse_str_to_list` has no empty
    form; no layout is None). Raises `SpecError` naming the field, the value and the fix."""
    if layout is not None and not layout.replace(",", "").strip():
        raise SpecError(
            f"ParallelPlan.pipeline_model_parallel_layout must hold the layer symbols of its "
            f"virtual stages, got {layout!r}: write them between '|' (e.g. 'Et|(tt|)*30mL'), "
            "or leave the layout out for the split of the other pipeline fields"
        )


@functools.lru_cache(maxsize=256)
def expand_layout(layout: str) -> tuple[str, ...]:
    """The virtual stages of a layout string, one string of layout characters each.

    Same expansion as Megatron's `parse_str_to_list`: commas are dropped, then every
    ``(group)*n`` is repeated (groups do not nest), then every ``x*n``; the result is split
    at ``|``. Raises `SpecError` for an empty layout (`require_layout_text`), a repeat
    that expands past `MAX_LAYOUT_CHARS` (`_require_short_expansion`) or a character
    outside `LAYOUT_SYMBOLS`. Memoized: the
    split checks of `specs.pipeline_layout_checks` read the same few layouts for every candidate
    plan of a search.
    """
    require_layout_text(layout)
    text = layout.replace(",", "")
    for pattern in (_GROUP_REPEAT, _CHAR_REPEAT):
        _require_short_expansion(layout, pattern, text)
        text = pattern.sub(lambda g: g.group(1) * int(g.group(2)), text)
    stages = tuple(text.split("|"))
    for i, stage in enumerate(stages):
        bad = [ch for ch in stage if ch not in LAYOUT_SYMBOLS]
        if bad:
            known = ", ".join(f"{k} ({v})" for k, v in LAYOUT_SYMBOLS.items())
            raise SpecError(
                f"pipeline_model_parallel_layout ({layout!r}): character {bad[0]!r} in virtual "
                f"stage {i} ({stage!r}) is not a layout symbol: use {known}, '|' between "
                "stages and (...)*n or x*n to repeat"
            )
    return stages


def _require_short_expansion(layout: str, pattern: re.Pattern[str], text: str) -> None:
    """Raises `SpecError` when repeating the ``pattern`` matches of ``text`` would make a
    string longer than `MAX_LAYOUT_CHARS`; the length is counted, not built."""
    length = len(text)
    for g in pattern.finditer(text):
        count = int(g.group(2)) if len(g.group(2)) <= 9 else MAX_LAYOUT_CHARS + 1
        length += len(g.group(1)) * count - len(g.group(0))
        if length > MAX_LAYOUT_CHARS:
            raise SpecError(
                f"pipeline_model_parallel_layout ({layout[:60]!r}): the repeat "
                f"{g.group(0)[:40]!r} expands the layout past {MAX_LAYOUT_CHARS:,} characters, "
                "more than one symbol per layer and stage: repeat each stage as often as the "
                "model has stages (e.g. 'Et|(tt|)*30mL')"
            )


def layout_vpp(layout: str, pp: int) -> int | None:
    """The virtual pipeline size a layout implies on ``pp`` pipeline ranks: its number of
    virtual stages over pp, as Megatron-LM's `validate_args` sets
    ``virtual_pipeline_model_parallel_size`` from ``--pipeline-model-parallel-layout``
    (megatron-facts.md §8.2). None when the layout does not parse or pp does not divide its
    stages; the layout rules (`specs.pipeline_layout_checks`) then say why."""
    try:
        stages = len(expand_layout(layout))
    except SpecError:
        return None
    return stages // pp if pp >= 1 and stages % pp == 0 else None


def compress_layout(stages: tuple[str, ...]) -> str:
    """A layout string for ``stages`` that `expand_layout` reads back: runs of equal
    stages become ``(stage|)*n``, runs of one character inside a stage ``x*n``."""

    def stage_text(stage: str) -> str:
        out, i = [], 0
        while i < len(stage):
            j = i
            while j < len(stage) and stage[j] == stage[i]:
                j += 1
            out.append(stage[i] * (j - i) if j - i <= 3 else f"{stage[i]}*{j - i}")
            i = j
        return "".join(out)

    parts, i = [], 0
    while i < len(stages):
        j = i
        while j < len(stages) and stages[j] == stages[i]:
            j += 1
        text = stage_text(stages[i])
        if j - i >= 2 and j < len(stages):  # a repeated run that a later stage closes
            parts.append(f"({text}|)*{j - i}")
        else:
            parts.append(f"{text}|" * (j - i))
        i = j
    return "".join(parts)[:-1]


def balanced_layout(num_layers: int, mtp_layers: int, pp: int, vpp: int) -> str | None:
    """A layout string that spreads ``num_layers`` transformer layers over the pp·vpp
    virtual stages as evenly as Megatron's grammar allows: every stage holds
    floor(L / (pp·vpp)) layers and the first L mod (pp·vpp) stages one more, so the last
    stages, which also carry the MTP layers and the loss, are the lighter ones (the same
    placement as Megatron-Bridge's DeepSeek-V3 layouts, `recipes/deepseek/deepseek_v3.py`,
    with the remainder spread instead of left on the last stage). `E` opens the first stage;
    ``mtp_layers`` `m` and the `L` close the last. None when a stage would hold no layer."""
    stages = pp * vpp
    base, extra = divmod(num_layers, stages)
    if base == 0:
        return None
    counts = [base + (1 if s < extra else 0) for s in range(stages)]
    text = ["t" * n for n in counts]
    text[0] = "E" + text[0]
    text[-1] += "m" * mtp_layers + "L"
    return compress_layout(tuple(text))
