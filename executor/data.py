"""Token streams for training: synthetic, a text file as bytes, or a Megatron indexed dataset.

Every stream is a pure function from a sample index to ``seq_length + 1`` token ids (inputs
and the next-token targets overlap by one, as in Megatron's GPTDataset), so a run is
reproducible and resumable from the step number alone. Step ``s`` of a job with global
batch ``B`` uses samples ``s·B ... s·B + B - 1``; data-parallel rank ``d`` of ``dp`` takes
the contiguous slice ``d·B/dp ... (d+1)·B/dp - 1`` (ranks that differ only in tp, cp or pp
get the same slice; the engine splits sequences over cp itself).

Sources, named by `--data`:

- nothing: `SyntheticStream`, a noisy walk along one random cycle through the vocabulary.
  The next token is the current token's successor on the cycle with probability
  1 - `SYNTHETIC_NOISE`, else uniform, so a model that learns the successor table drives
  the loss from ln(vocab) towards the noise entropy: the loss must fall.
- ``file.txt`` (any file that is not an index prefix): the file's bytes are the tokens
  (vocabulary 256), cut into consecutive windows.
- ``prefix`` with ``prefix.bin`` and ``prefix.idx``: Megatron-LM's indexed dataset
  (``MMIDIDX``, format below); its sequences are concatenated in order and cut into
  windows the same way.

Megatron's ``.idx`` layout (little endian; `megatron/core/datasets/indexed_dataset.py`,
``_IndexWriter``/``_IndexReader``)::

    offset  size       field
    0       9          magic b"MMIDIDX\\x00\\x00"
    9       8  u64     version, always 1
    17      1  u8      dtype code of the .bin tokens: 1 uint8, 2 int8, 3 int16, 4 int32,
                       5 int64, 6 float64, 7 float32, 8 uint16
    18      8  u64     sequence count N
    26      8  u64     document count D (entries of document_indices, so documents + 1)
    34      4·N i32    sequence_lengths, tokens per sequence
    +       8·N i64    sequence_pointers, byte offset of each sequence in the .bin
    +       8·D i64    document_indices: 0, then the end (exclusive sequence index) of
                       each document
    +       N   i8     sequence_modes, only in multimodal datasets (ignored here)

The ``.bin`` is the token arrays of the sequences back to back. A missing, truncated or
inconsistent file is a `SpecError` raised by `resolve_data` in the parent, before any rank
starts; a token id at or above the model's vocabulary is a `SpecError` in the rank that
reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import torch

from specs.errors import SpecError

IDX_MAGIC = b"MMIDIDX\x00\x00"
"""First 9 bytes of every Megatron ``.idx`` file."""
IDX_VERSION = 1
"""The only index version Megatron writes."""
IDX_HEADER_BYTES = 34
"""magic (9) + version (8) + dtype code (1) + sequence count (8) + document count (8)."""
IDX_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
"""Megatron's `DType` codes for the ``.bin`` token type."""
BYTE_VOCAB = 256
"""Vocabulary of byte-level tokenization."""
SYNTHETIC_NOISE = 0.1
"""Probability that a synthetic token is uniform noise instead of the cycle successor."""

DataKind = Literal["synthetic", "text", "indexed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSource:
    """A validated `--data` argument."""

    kind: DataKind
    """``synthetic``, ``text`` (bytes of a file) or ``indexed`` (Megatron .bin/.idx)."""
    path: str | None = None
    """The text file, or the indexed dataset's prefix (without .bin/.idx); None if synthetic."""
    num_tokens: int = 0
    """Tokens in the file(s); 0 for the endless synthetic stream."""

    def describe(self) -> str:
        """One line for logs and checkpoints, e.g. ``indexed:/data/wiki_text_document``."""
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


class TokenStream(Protocol):
    """A reproducible source of training samples."""

    def sample(self, index: int) -> np.ndarray:
        """Token ids of sample ``index``: shape (seq_length + 1,), int64."""
        ...


# ---- resolving --data (runs in the parent, before any rank starts) -------------------------


def resolve_data(arg: str | None, *, vocab_size: int, seq_length: int) -> DataSource:
    """Validate a `--data` argument against the model and job; raise `SpecError` if unusable."""
    if arg is None:
        return DataSource(kind="synthetic")
    prefix = _index_prefix(arg)
    if prefix is not None:
        lengths, dtype = read_index(prefix)
        source = DataSource(kind="indexed", path=str(prefix), num_tokens=int(lengths.sum()))
        if dtype.kind == "f":
            raise SpecError(
                f"{prefix}.idx: token dtype {dtype} is floating point; token ids must be "
                "integers (re-tokenize with Megatron's preprocess_data.py)"
            )
    else:
        path = Path(arg)
        if not path.is_file():
            raise SpecError(
                f"--data {arg!r}: no such file, and no indexed dataset {arg}.bin / {arg}.idx; "
                "pass a text file, a Megatron dataset prefix, or omit --data for synthetic data"
            )
        if vocab_size < BYTE_VOCAB:
            raise SpecError(
                f"--data {arg!r} is read as bytes (vocabulary {BYTE_VOCAB}) but the model's "
                f"vocab_size is {vocab_size}; use a model with vocab_size >= {BYTE_VOCAB}"
            )
        source = DataSource(kind="text", path=str(path), num_tokens=path.stat().st_size)
    if source.num_tokens < seq_length + 1:
        raise SpecError(
            f"--data {arg!r} holds {source.num_tokens} tokens, fewer than one sample of "
            f"seq_length + 1 = {seq_length + 1}; use more data or a shorter seq_length"
        )
    return source


def _index_prefix(arg: str) -> Path | None:
    """The dataset prefix when ``arg`` names an indexed dataset (with or without suffix)."""
    path = Path(arg)
    base = path.with_suffix("") if path.suffix in (".bin", ".idx") else path
    has_bin = base.with_name(base.name + ".bin").exists()
    has_idx = base.with_name(base.name + ".idx").exists()
    if has_bin != has_idx:
        missing = ".idx" if has_bin else ".bin"
        raise SpecError(
            f"indexed dataset {base}: {base}{missing} is missing; a Megatron dataset is a "
            ".bin and an .idx file with the same prefix"
        )
    return base if has_bin else None


def read_index(prefix: str | Path) -> tuple[np.ndarray, np.dtype]:
    """Parse and check ``prefix.idx`` against ``prefix.bin``: (sequence lengths, token dtype)."""
    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    raw = idx.read_bytes()
    if len(raw) < IDX_HEADER_BYTES or raw[:9] != IDX_MAGIC:
        raise SpecError(f"{idx}: not a Megatron index (expected the magic bytes {IDX_MAGIC!r})")
    version, code, num_seqs, num_docs = struct.unpack_from("<QBQQ", raw, 9)
    if version != IDX_VERSION:
        raise SpecError(f"{idx}: index version {version}, only version {IDX_VERSION} exists")
    if code not in IDX_DTYPES:
        raise SpecError(f"{idx}: unknown dtype code {code}; valid codes are 1-8")
    body = 4 * num_seqs + 8 * num_seqs + 8 * num_docs
    if len(raw) not in (IDX_HEADER_BYTES + body, IDX_HEADER_BYTES + body + num_seqs):
        raise SpecError(
            f"{idx}: {len(raw)} bytes, but a header of {num_seqs} sequences and {num_docs} "
            f"document entries needs {IDX_HEADER_BYTES + body}; the file is truncated or corrupt"
        )
    dtype = IDX_DTYPES[code]
    lengths = np.frombuffer(raw, np.int32, num_seqs, IDX_HEADER_BYTES)
    pointers = np.frombuffer(raw, np.int64, num_seqs, IDX_HEADER_BYTES + 4 * num_seqs)
    expected = np.concatenate(([0], np.cumsum(lengths.astype(np.int64))[:-1])) * dtype.itemsize
    if num_seqs and (lengths.min() < 0 or not np.array_equal(pointers, expected[:num_seqs])):
        raise SpecError(
            f"{idx}: sequence pointers are not the running sum of the sequence lengths; "
            "only contiguous datasets (as Megatron's builder writes them) are supported"
        )
    need = int(lengths.sum()) * dtype.itemsize
    have = bin_.stat().st_size
    if have != need:
        raise SpecError(
            f"{bin_}: {have} bytes, but {idx} describes {int(lengths.sum())} tokens of "
            f"{dtype} = {need} bytes; the .bin and .idx do not belong together"
        )
    return lengths, dtype


def write_indexed_dataset(
    prefix: str | Path, documents: Sequence[Sequence[int]], *, dtype: type = np.uint16
) -> None:
    """Write ``prefix.bin`` / ``prefix.idx`` in Megatron's format, one sequence per document."""
    np_dtype = np.dtype(dtype)
    code = next(c for c, d in IDX_DTYPES.items() if d == np_dtype)
    arrays = [np.asarray(doc, dtype=np_dtype) for doc in documents]
    lengths = np.array([len(a) for a in arrays], dtype=np.int32)
    pointers = np.concatenate(([0], np.cumsum(lengths.astype(np.int64))[:-1])) * np_dtype.itemsize
    doc_index = np.arange(len(arrays) + 1, dtype=np.int64)
    with open(f"{prefix}.bin", "wb") as f:
        for a in arrays:
            f.write(a.tobytes())
    with open(f"{prefix}.idx", "wb") as f:
        f.write(IDX_MAGIC)
        f.write(struct.pack("<QBQQ", IDX_VERSION, code, len(arrays), len(doc_index)))
        f.write(lengths.tobytes())
        f.write(pointers[: len(arrays)].astype(np.int64).tobytes())
        f.write(doc_index.tobytes())


# ---- streams (open in each rank) ------------------------------------------------------------


class SyntheticStream:
    """Noisy walks along one random cycle through the vocabulary (see the module doc)."""

    def __init__(self, vocab_size: int, seq_length: int, seed: int) -> None:
        self.vocab_size = vocab_size
        self.seq_length = seq_length
        self.seed = seed
        self._cycle = np.random.default_rng(seed).permutation(vocab_size)
        self._position = np.empty(vocab_size, dtype=np.int64)
        self._position[self._cycle] = np.arange(vocab_size)

    def sample(self, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        n = self.seq_length + 1
        restart = rng.random(n) < SYNTHETIC_NOISE
        restart[0] = True
        fresh = rng.integers(0, self.vocab_size, n)
        t = np.arange(n)
        # Index of the latest restart at or before t; the walk advances one step per token.
        last = np.maximum.accumulate(np.where(restart, t, 0))
        steps = self._position[fresh[last]] + (t - last)
        return self._cycle[steps % self.vocab_size].astype(np.int64)


@dataclass(frozen=True, slots=True)
class WindowStream:
    """Consecutive windows of ``seq_length + 1`` tokens over a flat token array, wrapping
    around at the end (consecutive windows share one token, the last target)."""

    tokens: np.ndarray
    seq_length: int
    vocab_size: int
    where: str

    def sample(self, index: int) -> np.ndarray:
        num_windows = (len(self.tokens) - 1) // self.seq_length
        start = (index % num_windows) * self.seq_length
        window = np.asarray(self.tokens[start : start + self.seq_length + 1], dtype=np.int64)
        if window.max() >= self.vocab_size or window.min() < 0:
            raise SpecError(
                f"{self.where}: sample {index} holds token id {int(window.max())} outside the "
                f"model's vocabulary [0, {self.vocab_size}); use the tokenizer the model was "
                "built for, or a model with a larger vocab_size"
            )
        return window


def open_stream(source: DataSource, *, vocab_size: int, seq_length: int, seed: int) -> TokenStream:
    """The stream of a validated source (memory-maps files, reads nothing yet)."""
    if source.kind == "synthetic":
        return SyntheticStream(vocab_size, seq_length, seed)
    if source.path is None:
        raise SpecError(f"data source {source.kind!r} needs a path; build it with resolve_data")
    if source.kind == "text":
        tokens = np.memmap(source.path, dtype=np.uint8, mode="r")
        return WindowStream(tokens, seq_length, vocab_size, source.path)
    _, dtype = read_index(source.path)
    tokens = np.memmap(f"{source.path}.bin", dtype=dtype, mode="r")
    return WindowStream(tokens, seq_length, vocab_size, f"{source.path}.bin")


def rank_batch(
    stream: TokenStream, step: int, *, global_batch_size: int, dp_rank: int, dp_size: int
) -> torch.Tensor:
    """This data-parallel rank's share of step ``step``: (global_batch / dp, seq + 1) int64."""
    if global_batch_size % dp_size:
        raise SpecError(
            f"global_batch_size ({global_batch_size}) must be divisible by dp ({dp_size}) to "
            "give each data-parallel rank the same number of sequences"
        )
    per_rank = global_batch_size // dp_size
    first = step * global_batch_size + dp_rank * per_rank
    rows = [stream.sample(first + i) for i in range(per_rank)]
    return torch.from_numpy(np.stack(rows))
