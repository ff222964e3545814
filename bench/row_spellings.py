"""The one place where a published row's free text is brought to the spellings the row
readers take (`normalised_row`), one rule per column kind.

Rows of a published-runs CSV (schema and column guide: ``published-runs-dev.md``) are
written by hand, and a transcriber may spell one setting several ways: ``GB200 NVL72`` for
``GB200 (NVL72)``, ``bfloat16`` for ``BF16``, ``1,024`` for ``1024``, ``✓`` for ``yes``.
`normalised_row` rewrites such a cell to the spelling the development set uses, so that every
reader downstream (`published_rows`, `row_model`, `row_options` and the recipe modules, which
match the ``gpu_type`` and ``precision`` texts by prefix) sees one text per meaning. A cell
already in an accepted spelling is returned unchanged: every cell of
``published-runs-dev.csv`` is a fixed point, so the development set is priced exactly as
before. A cell no rule recognises is also left as it is; the reader of its column then sets
the row apart with the column, the text and the spellings it takes.

Accepted spellings per column kind (docs/benchmarks.md, "Accepted spellings"):

- every column: a lone dash (``-``, ``–``, ``—``) or ``n/a`` states nothing (an empty cell;
  ``n/a`` is kept as written, the readers treat it as empty);
- counts (`COUNT_COLUMNS`): thousands separators (``1,024``), a trailing unit word
  (``4096 tokens``, ``8 GPUs``, ``512 sequences``); ``seq_length`` also takes a ``K`` suffix,
  2^10 tokens (``8K`` = 8192);
- figures (`FIGURE_COLUMNS`): thousands separators and a trailing unit (``s``, ``%``,
  ``TFLOP/s``, ``PFLOP/s``, ``tokens/s``);
- flags (``sequence_parallel``): `AFFIRMATIVE_WORDS` and ``✓`` read as ``yes``,
  `NEGATIVE_WORDS` and ``✗`` as ``no``;
- ``recompute``: Megatron's ``uniform`` recompute method (``--recompute-method uniform``:
  every layer's forward recomputed, in chunks of ``--recompute-num-layers``) reads as
  ``full``. A bare ``yes`` is ambiguous (Megatron-LM's ``--recompute-activations`` flag is
  selective recompute, the older ``--checkpoint-activations`` full) and is not rewritten;
  the row is set apart with that reason;
- ``vpp``: a negative word (``none``, ``no``) reads as 1 (no interleaving), an affirmative
  word as ``interleaved`` (degree not stated);
- ``fsdp_or_zero``: Megatron-FSDP under another spelling (``Megatron FSDP``, ``mcore fsdp``,
  ``megatron_fsdp``) reads as ``Megatron-FSDP``; ``dist opt``, ``distributed-optimizer`` and
  ``--use-distributed-optimizer`` as ``distributed optimizer``;
- ``precision`` (`PRECISION_SPELLINGS`): ``bfloat16`` reads as BF16, ``float16`` and
  ``half`` as FP16, an FP8 text naming the MX block format (``MX-FP8``, ``FP8 (MXFP8)``) as
  ``MXFP8``, one naming current scaling (``fp8_cs``, ``FP8 current scaling``) as ``FP8-CS``.
  A bare ``FP8`` is left as it is: Megatron-Bridge rows price it as per-tensor current
  scaling on every GPU, Blackwell included (`precision_recipes.fp8_weight_fields`), NeMo
  2.0 rows as delayed scaling (`nemo_options.fp8_fields`);
- ``gpu_type`` (`GPU_CHIPS`): a text that names a chip after a vendor or system word, or
  follows the chip with a space (``NVIDIA H100 80GB HBM3``, ``DGX B200``, ``GB200 NVL72``)
  becomes ``<chip> (<text>)``: the recipe tables match the chip before the parenthesis, and
  the profile choice still reads the memory size and form factor in the text (`profile_for`);
- ``trust``: a leading ``a``, ``b`` or ``c`` word in any case reads as that level.
"""

from __future__ import annotations

import re

UNSTATED_WORDS = ("n/a", "not stated", "unknown", "unspecified", "not given")
"""Lower-case openings of a column that states nothing: read as an empty cell."""

NEGATIVE_WORDS = ("none", "no", "off", "false", "disabled", "without", "not used")
"""Lower-case openings of a column that says a feature was not used."""

AFFIRMATIVE_WORDS = ("yes", "on", "true", "enabled", "used")
"""Lower-case openings of a column that says a feature was used, without saying how."""

CHECK_MARKS = ("✓", "✔", "☑")
"""Check marks that stand for ``yes``."""

CROSS_MARKS = ("✗", "✘", "×")
"""Cross marks that stand for ``no``."""

DASHES = re.compile(r"^[-–—]+$")
"""A cell that holds only dashes: states nothing."""

COUNT_COLUMNS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "ffn_hidden_size",
    "vocab_size",
    "seq_length",
    "num_experts",
    "moe_top_k",
    "moe_ffn_hidden_size",
    "moe_shared_expert_ffn",
    "num_gpus",
    "tp",
    "pp",
    "vpp",
    "cp",
    "ep",
    "etp",
    "dp",
    "micro_batch_size",
    "global_batch_size",
    "grad_accum",
)
"""Integer columns (`row_columns.column_int` reads them)."""

FIGURE_COLUMNS = (
    "tflops_per_gpu",
    "mfu_pct",
    "hfu_pct",
    "tokens_per_sec_per_gpu",
    "iteration_time_s",
    "aggregate_pflops",
    "derived_tokens_per_sec_per_gpu",
)
"""Published-figure columns (`row_columns.column_float` reads them)."""

COUNT_UNITS = r"(?:tokens?|seqs?|sequences?|samples?|gpus?|layers?|heads?|experts?)"
"""Unit words a count may carry after its number (lower case)."""

FIGURE_UNITS = (
    r"(s|sec|seconds?|%|tflop/?s|tflops|pflop/?s|pflops|"
    r"tok(ens)?/s(ec)?(/gpu)?|tokens per second( per gpu)?)"
)
"""Units a published figure may carry after its number (lower case)."""

NUMBER = r"\d{1,3}(?:,\d{3})+|\d+"
"""An integer, with or without thousands separators."""

GPU_CHIPS = re.compile(r"\b(GB300|GB200|B300|B200|H800|H200|H100|A800|A100)\b")
"""Chips of the stored profiles and of the rows the bench reads, in ``gpu_type`` text
(upper case); the first one named is the row's chip."""

PRECISION_SPELLINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(mxfp8|fp8-mx|alternative|not stated|fp8-cs)"), ""),
    (re.compile(r"^bfloat16\b|^bf-16\b"), "BF16"),
    (re.compile(r"^(float16|half)\b"), "FP16"),
    (re.compile(r"^fp8(?![0-9]).*(?<![a-z])mx|^mx[-_ ]?fp8"), "MXFP8"),
    (re.compile(r"^fp8(?![0-9]).*((?<![a-z])cs(?![a-z])|current)"), "FP8-CS"),
)
"""(pattern of the lower-case ``precision`` text, accepted spelling) in order, first match
wins; an empty spelling keeps the text (the development set's own spellings)."""


def unstated(text: str) -> bool:
    """Whether a column's text (any case) states nothing (`UNSTATED_WORDS`, or empty)."""
    return not text or text.lower().startswith(UNSTATED_WORDS)


def starts_with_word(text: str, words: tuple[str, ...]) -> bool:
    """Whether ``text`` (lower case) starts with one of ``words`` as a whole word."""
    return re.match(rf"({'|'.join(re.escape(w) for w in words)})\b", text) is not None


def affirmative(text: str) -> bool:
    """A check mark or an affirmative word (any case)."""
    return text in CHECK_MARKS or starts_with_word(text.lower(), AFFIRMATIVE_WORDS)


def negative(text: str) -> bool:
    """A cross mark or a negative word (any case)."""
    return text in CROSS_MARKS or starts_with_word(text.lower(), NEGATIVE_WORDS)


def count_text(column: str, text: str) -> str:
    """A count cell as digits where it is one (`COUNT_COLUMNS`); otherwise unchanged."""
    lower = text.lower()
    match = re.fullmatch(rf"({NUMBER})(\s*{COUNT_UNITS})?", lower)
    if match:
        return match.group(1).replace(",", "")
    if column == "seq_length":
        kilo = re.fullmatch(rf"(\d+)\s*k(\s*{COUNT_UNITS})?", lower)
        if kilo:
            return str(int(kilo.group(1)) * 1024)
    return text


def figure_text(text: str) -> str:
    """A figure cell as a plain number where it is one (`FIGURE_COLUMNS`); otherwise
    unchanged."""
    match = re.fullmatch(rf"({NUMBER})(\.\d+)?\s*{FIGURE_UNITS}?", text.lower())
    if match is None:
        return text
    return match.group(1).replace(",", "") + (match.group(2) or "")


def precision_text(text: str) -> str:
    """The accepted spelling of a ``precision`` cell (`PRECISION_SPELLINGS`)."""
    lower = text.lower()
    for pattern, spelling in PRECISION_SPELLINGS:
        if pattern.search(lower):
            return spelling or text
    return text


def gpu_chip(gpu_type: str) -> str | None:
    """The chip a ``gpu_type`` text names first (`GPU_CHIPS`), or None."""
    match = GPU_CHIPS.search(gpu_type.upper())
    return match.group(1) if match else None


def gpu_text(text: str) -> str:
    """``<chip> (<text>)`` for a ``gpu_type`` that names its chip elsewhere than at its start
    or follows it with a space; a text that opens with the chip followed by its end, ``(``
    or ``-`` (``B200``, ``GB200 (NVL72)``, ``H100-SXM5-80GB``) is kept."""
    chip = gpu_chip(text)
    if chip is None or re.match(rf"{chip}(\s*\(|-|$)", text):
        return text
    return f"{chip} ({text})"


def sequence_parallel_text(text: str) -> str:
    """``yes`` or ``no`` for a check or cross mark, Y or N; otherwise unchanged."""
    if text in CHECK_MARKS or text in ("Y", "y"):
        return "yes"
    if text in CROSS_MARKS or text in ("N", "n"):
        return "no"
    return text


def recompute_text(text: str) -> str:
    """``full`` for Megatron's ``uniform`` recompute method (a method of full recompute
    only, ``--recompute-method``); otherwise unchanged. A bare ``yes`` is kept: it does not
    say which granularity (`published_rows` sets such a row apart)."""
    if text.lower().startswith("uniform"):
        return "full"
    return text


def vpp_text(text: str) -> str:
    """``1`` for a negative word or mark, ``interleaved`` for an affirmative one."""
    if negative(text):
        return "1"
    if affirmative(text):
        return "interleaved"
    return text


SHARDING_SPELLINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(megatron|mcore|m-core)[ _]fsdp\b|^megatron_fsdp\b"), "Megatron-FSDP"),
    (
        re.compile(r"^(--use-)?distributed[-_]optimi[sz]er|^dist\.? ?opt(imi[sz]er)?\.?$"),
        "distributed optimizer",
    ),
)
"""(pattern of the lower-case ``fsdp_or_zero`` text, accepted spelling)."""


def sharding_text(text: str) -> str:
    """The accepted spelling of an ``fsdp_or_zero`` cell (`SHARDING_SPELLINGS`)."""
    lower = text.lower()
    for pattern, spelling in SHARDING_SPELLINGS:
        if pattern.search(lower):
            return spelling
    return text


def trust_text(text: str) -> str:
    """``A``, ``B`` or ``C`` for a cell that opens with that letter as a word, any case."""
    match = re.match(r"([abcABC])\b", text)
    return match.group(1).upper() if match else text


COLUMN_SPELLINGS = {
    "precision": precision_text,
    "gpu_type": gpu_text,
    "sequence_parallel": sequence_parallel_text,
    "recompute": recompute_text,
    "vpp": vpp_text,
    "fsdp_or_zero": sharding_text,
    "trust": trust_text,
}
"""Column -> rewrite of its stripped text (after the count and figure rules)."""


def cell_text(column: str, text: str) -> str:
    """One cell in its accepted spelling (module docstring); surrounding white space and a
    byte-order mark are kept only where the cell is otherwise unchanged."""
    stripped = text.strip().lstrip("\ufeff").strip()
    if DASHES.fullmatch(stripped):
        return ""
    new = stripped
    if column in COUNT_COLUMNS:
        new = count_text(column, new)
    elif column in FIGURE_COLUMNS:
        new = figure_text(new)
    rewrite = COLUMN_SPELLINGS.get(column)
    if rewrite is not None:
        new = rewrite(new)
    return text if new == stripped else new


def normalised_row(raw: dict) -> dict[str, str]:
    """``raw`` (a `csv.DictReader` row) with every cell in its accepted spelling
    (`cell_text`): a cell missing from a short line (None) reads as empty and the surplus
    cells of a long line (key None) are dropped. Idempotent; a row already in accepted
    spellings is returned equal."""
    cells = (
        (key.strip().lstrip("\ufeff").strip(), value or "")
        for key, value in raw.items()
        if isinstance(key, str) and not isinstance(value, list)
    )
    return {key: cell_text(key, value) for key, value in cells}
