"""A fuzz corpus of published rows: the development set's rows as another transcriber might
have written them (tests of bench/row_spellings.py and of the row path).

`SAME_MEANING` pairs a spelling with one the development set uses for the same setting, per
column kind; `OTHER_TEXTS` are texts a transcriber may write that mean something else or
nothing the readers know (a GPU without a stored profile, ZeRO-2, a recompute method that
covers some layers only). `FUZZ_ALPHABET` is both, per column. `write_csv` writes rows as a
CSV with the file-level variants: a byte-order mark, CRLF line ends, columns dropped,
unknown columns added.
"""

from __future__ import annotations

import csv
from pathlib import Path

SAME_MEANING: dict[str, tuple[tuple[str, str], ...]] = {
    "gpu_type": (
        ("H100 SXM", "H100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("nvidia h100-sxm5-80gb", "H100"),
        ("DGX H100", "H100"),
        ("H200", "H200"),
        ("NVIDIA H200 141GB", "H200"),
        ("A100 40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("DGX A100 80GB", "A100-SXM4-80GB"),
        ("DGX B200", "B200"),
        ("HGX B300", "B300"),
        ("GB200 NVL72", "GB200 (NVL72)"),
        ("NVIDIA GB300 NVL72", "GB300 (NVL72)"),
    ),
    "precision": (
        ("bf16", "BF16"),
        ("BF16 mixed", "BF16"),
        ("bfloat16", "BF16"),
        ("fp16 mixed", "FP16"),
        ("float16", "FP16"),
        ("FP8 (delayed scaling)", "FP8"),
        ("fp8-hybrid", "FP8"),
        ("mxfp8", "MXFP8"),
        ("MX-FP8", "MXFP8"),
        ("FP8 (MXFP8)", "MXFP8"),
        ("FP8 current scaling", "FP8-CS"),
        ("fp8_cs", "FP8-CS"),
        ("nvfp4", "NVFP4"),
    ),
    "recompute": (
        ("full", "full"),
        ("Full", "full"),
        ("uniform 1 layer", "full"),
        ("selective", "selective"),
        ("none", ""),
        ("no", ""),
        ("not stated", ""),
        ("-", ""),
    ),
    "sequence_parallel": (
        ("yes", ""),
        ("True", ""),
        ("on", ""),
        ("✓", ""),
        ("-", ""),
        ("False", "no"),
        ("✗", "no"),
        ("off", "no"),
    ),
    "vpp": (
        ("none", "1"),
        ("no", "1"),
        ("-", ""),
        ("interleaved", "interleaved (degree not stated)"),
    ),
    "fsdp_or_zero": (
        ("ZeRO-1", "distributed optimizer"),
        ("zero stage 1", "distributed optimizer"),
        ("distributed-optimizer", "distributed optimizer"),
        ("dist opt", "distributed optimizer"),
        ("--use-distributed-optimizer", "distributed optimizer"),
        ("Megatron FSDP", "Megatron-FSDP"),
        ("mcore fsdp", "Megatron-FSDP"),
        ("none", "none"),
        ("-", ""),
    ),
    "trust": (("a", "A"), ("b", "B"), ("B (secondary)", "B")),
}
"""Column -> (spelling, a development-set spelling of the same setting). A blank
``sequence_parallel`` means on with TP > 1, a blank ``recompute`` none, a blank ``vpp`` 1
(unless the notes name an interleaved schedule)."""

COUNT_FORMS = ("{n:,}", "{n} tokens", "{n} sequences", "{n} GPUs")
"""Ways to write a count ``n`` (thousands separators, a unit word)."""

FIGURE_FORMS = ("{x:,}", "{x} s", "{x}%", "{x} TFLOP/s", "{x:,} tokens/s")
"""Ways to write a published figure ``x`` (thousands separators, a unit)."""

OTHER_TEXTS: dict[str, tuple[str, ...]] = {
    "gpu_type": ("H800", "H100 PCIe", "H100 NVL", "L40S", "MI300X", "TPU v5p", ""),
    "precision": ("FP8", "MXFP4", "TF32", "FP32", "INT8", "FP8 blockwise", "mixed"),
    "recompute": ("yes", "block 2 layers", "partial", "offload", "maybe"),
    "sequence_parallel": ("maybe", "partly", "2"),
    "vpp": ("interleaved", "auto", "0", "2x", "3", "7"),
    "fsdp_or_zero": ("ZeRO-2", "ZeRO-3", "FSDP", "Megatron-FSDP", "sharded", "fairscale"),
    "seq_length": ("8K", "4k tokens", "about 4096", "0"),
    "global_batch_size": ("2M tokens", "1,024", "0", "-1"),
    "num_gpus": ("1,024", "8 x 8", ""),
    "micro_batch_size": ("-", "auto", "0", "3", "64"),
    "tp": ("3", "16", "0", "1,024"),
    "pp": ("3", "7", "0", "64"),
    "cp": ("3", "0", "2"),
    "ep": ("3", "128", "0"),
    "etp": ("2", "3", "0"),
    "num_layers": ("7", "1", "0"),
    "hidden_size": ("1000", "7"),
    "num_attention_heads": ("7", "0"),
    "num_query_groups": ("3", "0", ""),
    "num_experts": ("0", "3", ""),
    "moe_top_k": ("0", "300", ""),
    "model": ("Falcon 40B", "Unknown-LM 13B", "llama3 70b", ""),
    "arch_notes": ("", "SwiGLU", "GeLU", "parallel transformer block", "mamba"),
    "tokens_per_sec_per_gpu": ("", "n/a", "~1200", "-5"),
    "iteration_time_s": ("", "n/a", "1.2e1", "0"),
    "tflops_per_gpu": ("", "400 TFLOP/s"),
    "mfu_pct": ("", "45%", "0.45"),
    "aggregate_pflops": ("", "4.4", "12.3 PFLOP/s"),
    "trust": ("", "D", "high"),
}
"""Column -> texts that mean no development-set spelling, or name what no reader prices."""


def fuzz_alphabet() -> dict[str, tuple[str, ...]]:
    """Column -> every text of `SAME_MEANING` and `OTHER_TEXTS` for it."""
    columns = set(SAME_MEANING) | set(OTHER_TEXTS)
    return {
        column: tuple(s for s, _ in SAME_MEANING.get(column, ())) + OTHER_TEXTS.get(column, ())
        for column in sorted(columns)
    }


FUZZ_ALPHABET = fuzz_alphabet()


def dev_spelling_rows(
    rows: list[dict[str, str]], column: str, dev_text: str
) -> list[dict[str, str]]:
    """The ``rows`` whose ``column`` holds ``dev_text`` (a `SAME_MEANING` right-hand side);
    for ``gpu_type`` the rows whose text opens with it."""
    if column == "gpu_type":
        return [r for r in rows if r[column].upper().startswith(dev_text.upper())]
    return [r for r in rows if r.get(column, "") == dev_text]


def write_csv(
    rows: list[dict[str, str]],
    path: Path,
    *,
    bom: bool = False,
    crlf: bool = False,
    drop: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
) -> Path:
    """``rows`` as a CSV at ``path``, with a byte-order mark, CRLF line ends, the columns
    ``drop`` left out and the columns of ``extra`` (name -> text) added to every row."""
    extra = extra or {}
    columns = [c for c in rows[0] if c not in drop] + list(extra)
    with path.open("w", newline="", encoding="utf-8-sig" if bom else "utf-8") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\r\n" if crlf else "\n")
        writer.writeheader()
        for raw in rows:
            writer.writerow({c: raw.get(c, "") for c in columns if c not in extra} | extra)
    return path
