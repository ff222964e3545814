"""The row path and `validate_published.main` on rows another transcriber wrote
(`tests/bench/row_variants.py`): any row built from the fuzz alphabet is priced or set apart
with a reason, never an exception; a CSV with a byte-order mark, CRLF line ends, no trust
column, unknown columns and other spellings prices as the development set's rows do."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specs.errors import SpecError
from tests.bench.bench_loader import load_bench
from tests.bench.row_variants import (
    COUNT_FORMS,
    FIGURE_FORMS,
    FUZZ_ALPHABET,
    SAME_MEANING,
    write_csv,
)
from tests.bench.validation_cases import dev_set

published_csv = load_bench("published_csv")
figures = load_bench("row_figures")
rows_mod = load_bench("published_rows")
pricing = load_bench("row_pricing")
validate = load_bench("validate_published")


def _reformatted(text: str, forms: tuple[str, ...], index: int, integer: bool) -> str:
    """``text`` (a number) written in ``forms[index]``; unchanged when it is no number."""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        return text
    form = forms[index % len(forms)]
    return form.format(n=value) if integer else form.format(x=value)


@st.composite
def fuzz_rows(draw: st.DrawFn) -> dict[str, str]:
    """A development-set row with some columns drawn from `FUZZ_ALPHABET` and its counts
    and figures written in other forms."""
    rows = dev_set()
    raw = dict(draw(st.sampled_from(rows)))
    columns = draw(st.sets(st.sampled_from(sorted(FUZZ_ALPHABET)), max_size=4))
    for column in columns:
        raw[column] = draw(st.sampled_from(FUZZ_ALPHABET[column]))
    for column in ("seq_length", "global_batch_size", "num_gpus", "micro_batch_size"):
        if draw(st.booleans()):
            raw[column] = _reformatted(raw[column], COUNT_FORMS, draw(st.integers(0, 9)), True)
    for column in ("iteration_time_s", "tokens_per_sec_per_gpu", "tflops_per_gpu"):
        if draw(st.booleans()):
            raw[column] = _reformatted(raw[column], FIGURE_FORMS, draw(st.integers(0, 9)), False)
    return raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz_rows())
def test_a_fuzzed_row_reads_as_a_case_or_a_reason(raw):
    try:
        _, published_s = figures.published_case(raw)
    except (rows_mod.NotExpressible, SpecError) as err:
        assert str(err).splitlines()[0].strip()
        return
    assert published_s > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz_rows())
def test_a_fuzzed_row_is_priced_or_set_apart_with_a_reason(raw):
    # The bench's per-row function: the case, the plan rules and the estimate.
    try:
        outcome, case = pricing.evaluate_row(raw)
    except (rows_mod.NotExpressible, SpecError) as err:
        assert pricing.apart_reason(err).strip()
        return
    assert outcome.published_s > 0 and outcome.predicted_s > 0
    assert case.cluster.num_gpus == case.plan.world_size


def _main_json(csv_path: Path, *extra: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = validate.main(["--csv", str(csv_path), "--no-fit", "--json", *extra])
    assert code == 0
    return json.loads(out.getvalue())


def _respelled(raw: dict[str, str]) -> dict[str, str]:
    """``raw`` with each column that holds a development-set spelling of `SAME_MEANING`
    written in the other spelling, and its counts with thousands separators or units."""
    changed = dict(raw)
    for column, pairs in SAME_MEANING.items():
        other = next((text for text, accepted in pairs if accepted == raw.get(column)), None)
        if other is not None:
            changed[column] = other
    if raw["gpu_type"].endswith("(NVL72)"):
        changed["gpu_type"] = "NVIDIA " + raw["gpu_type"].replace(" (NVL72)", " NVL72")
    for column, form in (("global_batch_size", "{n:,}"), ("seq_length", "{n} tokens")):
        if raw[column].isdigit():
            changed[column] = form.format(n=int(raw[column]))
    return changed


def test_a_respelled_csv_prices_as_the_development_set(tmp_path):
    # Trust B rows, every 6th: each source, GPU type and precision spelling of the set.
    rows = [r for r in dev_set() if r["trust"] == "B"][::6]
    plain = _main_json(write_csv(rows, tmp_path / "plain.csv"))
    respelled = write_csv(
        [_respelled(r) for r in rows],
        tmp_path / "respelled.csv",
        bom=True,
        crlf=True,
        drop=("trust",),
        extra={"transcriber_note": "read off the table"},
    )
    assert respelled.read_bytes().startswith(b"\xef\xbb\xbf")
    fuzzed = _main_json(respelled, "--trust", "B")
    assert plain["rows"] and fuzzed["rows"] == plain["rows"]
    assert fuzzed["not_expressible"] == plain["not_expressible"]


def test_every_row_of_a_fuzzed_csv_is_priced_or_listed_apart(tmp_path):
    rows = dev_set()
    fuzzed = []
    for i, raw in enumerate(rows[::5]):
        column = sorted(FUZZ_ALPHABET)[i % len(FUZZ_ALPHABET)]
        texts = FUZZ_ALPHABET[column]
        fuzzed.append(raw | {"row_id": f"f{i}", "trust": "B", column: texts[i % len(texts)]})
    result = _main_json(write_csv(fuzzed, tmp_path / "fuzzed.csv", crlf=True))
    listed = [r["row_id"] for r in result["rows"]]
    listed += [r["row_id"] for r in result["not_expressible"]]
    listed += [r["row_id"] for r in result["priced_apart"]["rows"]]
    # A trust text other than A or B (blank, "D", "high") puts its row with the trust C rows.
    untrusted = [r for r in result["trust_c"] if r["trust"] not in ("A", "B")]
    listed += [r["row_id"] for r in untrusted]
    assert sorted(listed) == sorted(r["row_id"] for r in fuzzed)
    apart = result["not_expressible"] + [r for r in untrusted if not r["priced"]]
    assert all(r["reason"].strip() for r in apart)


def test_a_csv_with_a_byte_order_mark_passes_the_header_check(tmp_path):
    rows = dev_set()[:2]
    path = write_csv(rows, tmp_path / "bom.csv", bom=True, crlf=True, drop=("trust",))
    assert published_csv.header_problem(path, "B") is None
    assert [r["row_id"] for r in published_csv.read_rows(path, "B")] == ["1", "2"]
