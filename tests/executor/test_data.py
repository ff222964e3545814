"""Token streams: determinism, sharding, learnable synthetic data, text and Megatron files."""

from __future__ import annotations

import itertools
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.data import (
    IDX_HEADER_BYTES,
    SYNTHETIC_NOISE,
    SyntheticStream,
    open_stream,
    rank_batch,
    read_index,
    resolve_data,
    write_indexed_dataset,
)
from specs.errors import SpecError


def _entropy_floor_nats(vocab: int, noise: float) -> float:
    """Conditional entropy of the next synthetic token given the current one: the
    successor with probability 1 - noise + noise/V, every other token noise/V."""
    p_next = 1 - noise + noise / vocab
    p_other = noise / vocab
    return -(p_next * math.log(p_next) + (vocab - 1) * p_other * math.log(p_other))


# ---- synthetic ---------------------------------------------------------------------------


def test_synthetic_samples_are_deterministic_and_in_range() -> None:
    a = SyntheticStream(64, 32, seed=3)
    b = SyntheticStream(64, 32, seed=3)
    assert np.array_equal(a.sample(5), b.sample(5))
    assert not np.array_equal(a.sample(5), a.sample(6))
    assert not np.array_equal(a.sample(5), SyntheticStream(64, 32, seed=4).sample(5))
    s = a.sample(0)
    assert s.shape == (33,) and s.dtype == np.int64
    assert s.min() >= 0 and s.max() < 64


def test_synthetic_next_token_follows_one_successor_table() -> None:
    stream = SyntheticStream(50, 2000, seed=0)
    tokens = np.concatenate([stream.sample(i) for i in range(4)])
    successor: dict[int, dict[int, int]] = {}
    for cur, nxt in itertools.pairwise(tokens):
        successor.setdefault(int(cur), {}).setdefault(int(nxt), 0)
        successor[int(cur)][int(nxt)] += 1
    # The most frequent successor carries ~ 1 - noise of the mass (boundaries add noise).
    top = sum(max(c.values()) for c in successor.values())
    total = sum(sum(c.values()) for c in successor.values())
    assert top / total == pytest.approx(1 - SYNTHETIC_NOISE, abs=0.03)
    assert _entropy_floor_nats(512, SYNTHETIC_NOISE) < 0.2 * math.log(512)


def test_a_bigram_model_learns_the_synthetic_stream() -> None:
    vocab, seq = 32, 64
    stream = SyntheticStream(vocab, seq, seed=1)
    torch.manual_seed(0)
    table = torch.nn.Embedding(vocab, vocab)
    opt = torch.optim.Adam(table.parameters(), lr=0.1)
    losses = []
    for step in range(60):
        batch = rank_batch(stream, step, global_batch_size=8, dp_rank=0, dp_size=1)
        logits = table(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].ravel())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 0.9 * math.log(vocab)
    assert losses[-1] < _entropy_floor_nats(vocab, SYNTHETIC_NOISE) + 0.3


@settings(max_examples=50, deadline=None)
@given(
    dp=st.sampled_from([1, 2, 4]),
    per_rank=st.integers(1, 3),
    step=st.integers(0, 20),
)
def test_dp_shards_tile_the_global_batch(dp: int, per_rank: int, step: int) -> None:
    stream = SyntheticStream(97, 8, seed=2)
    global_batch = dp * per_rank
    shards = [
        rank_batch(stream, step, global_batch_size=global_batch, dp_rank=d, dp_size=dp)
        for d in range(dp)
    ]
    whole = rank_batch(stream, step, global_batch_size=global_batch, dp_rank=0, dp_size=1)
    assert all(s.shape == (per_rank, 9) for s in shards)
    assert torch.equal(torch.cat(shards), whole)


def test_batch_not_divisible_by_dp_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"global_batch_size \(6\) must be divisible by dp \(4\)"):
        rank_batch(SyntheticStream(8, 4, 0), 0, global_batch_size=6, dp_rank=0, dp_size=4)


# ---- text files --------------------------------------------------------------------------


def test_text_file_is_read_as_bytes_in_consecutive_windows(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_bytes(bytes(range(10, 60)))  # 50 tokens
    source = resolve_data(str(path), vocab_size=256, seq_length=8)
    assert (source.kind, source.num_tokens) == ("text", 50)
    stream = open_stream(source, vocab_size=256, seq_length=8, seed=0)
    assert stream.sample(0).tolist() == list(range(10, 19))
    assert stream.sample(1).tolist() == list(range(18, 27))  # windows share one token
    assert stream.sample(6).tolist() == stream.sample(0).tolist()  # 49 // 8 = 6 windows


def test_text_file_needs_a_byte_vocabulary_and_enough_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny.txt"
    path.write_text("hello")
    with pytest.raises(SpecError, match=r"vocab_size is 128; use a model with vocab_size >= 256"):
        resolve_data(str(path), vocab_size=128, seq_length=4)
    with pytest.raises(SpecError, match=r"holds 5 tokens, fewer than one sample .* = 9"):
        resolve_data(str(path), vocab_size=256, seq_length=8)


def test_missing_data_is_a_spec_error_naming_the_options(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file, and no indexed dataset"):
        resolve_data(str(tmp_path / "nope"), vocab_size=512, seq_length=8)
    assert resolve_data(None, vocab_size=512, seq_length=8).kind == "synthetic"


# ---- Megatron indexed datasets -----------------------------------------------------------


def test_indexed_round_trip_and_header_layout(tmp_path: Path) -> None:
    prefix = tmp_path / "wiki_text_document"
    docs = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    write_indexed_dataset(prefix, docs, dtype=np.uint16)
    raw = (tmp_path / "wiki_text_document.idx").read_bytes()
    # Header fields at the offsets Megatron's _IndexReader reads them.
    assert raw[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<QBQQ", raw, 9) == (1, 8, 3, 4)
    assert len(raw) == IDX_HEADER_BYTES + 3 * 4 + 3 * 8 + 4 * 8
    lengths, dtype = read_index(prefix)
    assert lengths.tolist() == [3, 2, 4] and dtype == np.uint16
    assert (tmp_path / "wiki_text_document.bin").read_bytes() == np.arange(
        1, 10, dtype="<u2"
    ).tobytes()
    for arg in (str(prefix), f"{prefix}.bin", f"{prefix}.idx"):
        source = resolve_data(arg, vocab_size=16, seq_length=4)
        assert (source.kind, source.path, source.num_tokens) == ("indexed", str(prefix), 9)
    stream = open_stream(source, vocab_size=16, seq_length=4, seed=0)
    assert stream.sample(0).tolist() == [1, 2, 3, 4, 5]
    assert stream.sample(1).tolist() == [5, 6, 7, 8, 9]


def test_indexed_token_outside_the_vocabulary_fails_in_the_reader(tmp_path: Path) -> None:
    write_indexed_dataset(tmp_path / "d", [[1, 2, 300, 4, 5]], dtype=np.int32)
    source = resolve_data(str(tmp_path / "d"), vocab_size=256, seq_length=4)
    stream = open_stream(source, vocab_size=256, seq_length=4, seed=0)
    with pytest.raises(SpecError, match=r"token id 300 outside the model's vocabulary \[0, 256\)"):
        stream.sample(0)


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda raw: b"NOTANIDX!" + raw[9:], "not a Megatron index"),
        (lambda raw: raw[:9] + struct.pack("<Q", 2) + raw[17:], "index version 2"),
        (lambda raw: raw[:17] + b"\x09" + raw[18:], "unknown dtype code 9"),
        (lambda raw: raw[:-8], "truncated or corrupt"),
        (lambda raw: raw[:12], "not a Megatron index"),
    ],
)
def test_malformed_index_is_a_spec_error(tmp_path: Path, corrupt, message: str) -> None:
    prefix = tmp_path / "d"
    write_indexed_dataset(prefix, [[1, 2, 3, 4], [5, 6]])
    idx = tmp_path / "d.idx"
    idx.write_bytes(corrupt(idx.read_bytes()))
    with pytest.raises(SpecError, match=message):
        resolve_data(str(prefix), vocab_size=16, seq_length=2)


def test_bin_that_does_not_match_its_index_is_a_spec_error(tmp_path: Path) -> None:
    prefix = tmp_path / "d"
    write_indexed_dataset(prefix, [[1, 2, 3, 4], [5, 6]])
    (tmp_path / "d.bin").write_bytes(b"\x00" * 6)
    with pytest.raises(SpecError, match="do not belong together"):
        resolve_data(str(prefix), vocab_size=16, seq_length=2)
    (tmp_path / "d.bin").unlink()
    with pytest.raises(SpecError, match=r"d\.bin is missing"):
        resolve_data(str(prefix), vocab_size=16, seq_length=2)
