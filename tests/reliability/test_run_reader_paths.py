"""read_run's two paths agree: whatever pyarrow's fast path (one space between fields, every core)
takes, the general reader (pandas' C parser, then a line scan) reads into the same frame, and a
document given twice for a query is the same error; files it does not take (tabs, runs of spaces,
odd numbers, blank-looking lines, bad bytes) go to the general reader. Also: big writes and reads
show a progress bar unless told not to, and a write that fails leaves the old file."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import FrameValidationError, read_run, write_run
from kolm_search.io._arrow_trec import read_run_arrow
from kolm_search.io.trec import read_run_text

IDS = st.sampled_from(["q1", "q2", "1", "01", "é", "a\xa0b", "Q0", "x\x00y", "d", "d1", "∂", "a\u3000b"])
RANKS = st.sampled_from(["1", "2", "01", "+1", "-3", "1.0", "1e3", "x", "9223372036854775807", "-9223372036854775808"])
SCORES = st.sampled_from(["0.5", "-.5", "5.", "1e5", "1E+5", "+2", "inf", "nan", "-inf", "1e400", "0x10", "1_0", "3",
                          "2.5e-324", "1,5"])
SEPS = st.sampled_from([" "] * 8 + ["  ", "\t", " \t"])
ENDS = st.sampled_from(["\n"] * 6 + ["\r\n", "\r", " \n", "\n\n"])


@st.composite
def run_files(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        fields = [draw(IDS), draw(st.sampled_from(["Q0", "0", "Q0"])), draw(IDS), draw(RANKS), draw(SCORES),
                  draw(st.sampled_from(["run", "t", "t\x00", "tag"]))]
        if draw(st.integers(0, 20)) == 0:
            fields = fields[: draw(st.integers(1, 5))]
        line = "".join(f + draw(SEPS) for f in fields[:-1]) + fields[-1]
        lines.append(line + draw(ENDS))
    text = ("\ufeff" if draw(st.booleans()) else "") + "".join(lines)
    return text.encode("utf-8")


def _normal(frame: pd.DataFrame) -> list[tuple[str, str, int, float]]:
    return [(str(q), str(d), int(r), float(s)) for q, d, r, s in
            frame[["qid", "doc_id", "rank", "score"]].itertuples(index=False, name=None)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run_files(), st.booleans())
def test_fast_path_reads_what_the_general_reader_reads(tmp_path: Path, body: bytes, gz: bool) -> None:
    path = tmp_path / ("r.trec.gz" if gz else "r.trec")
    path.write_bytes(gzip.compress(body) if gz else body)
    try:
        fast = read_run_arrow(path)
    except FrameValidationError as exc:
        with pytest.raises(FrameValidationError) as general:
            read_run_text(path)
        assert str(general.value) == str(exc)
        return
    if fast is None:
        return
    general = read_run_text(path)
    assert _normal(fast) == _normal(general)
    assert isinstance(fast["qid"].dtype, pd.CategoricalDtype) and isinstance(fast["doc_id"].dtype, pd.StringDtype)
    assert fast["rank"].dtype == np.int64 and fast["score"].dtype == np.float64
    assert read_run(path).equals(fast)


def test_a_clean_file_takes_the_fast_path_and_duplicates_are_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n_q, depth = 300, 400  # several 16 MiB blocks would be needed to split a query; force small blocks below
    run = pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_q)], depth),
                        "doc_id": [f"d{d}" for d in rng.permutation(n_q * depth)], "score": rng.random(n_q * depth)})
    write_run(run, tmp_path / "r.trec")
    fast = read_run_arrow(tmp_path / "r.trec")
    assert fast is not None and _normal(fast) == _normal(read_run_text(tmp_path / "r.trec"))
    lines = (tmp_path / "r.trec").read_text().splitlines(keepends=True)
    for at in (5, len(lines) // 2 + 10, len(lines) - 1):  # a document of its query again, three lines on
        assert at % depth >= 3
        dup = [*lines[:at + 1], lines[at - 3], *lines[at + 1:]]
        (tmp_path / "d.trec").write_text("".join(dup))
        with pytest.raises(FrameValidationError, match="appears twice for query") as fast_error:
            read_run(tmp_path / "d.trec")
        with pytest.raises(FrameValidationError) as general_error:
            read_run_text(tmp_path / "d.trec")
        assert str(fast_error.value) == str(general_error.value)


def test_queries_split_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query whose rows fall in two parse blocks, or that comes back later in the file, is
    checked over all its rows."""
    import pyarrow.csv as pcsv

    real = pcsv.ReadOptions

    def small_blocks(*args: object, **kwargs: object) -> object:
        kwargs["block_size"] = 4096
        return real(*args, **kwargs)

    monkeypatch.setattr(pcsv, "ReadOptions", small_blocks)
    rows = [f"q{q % 7} Q0 d{q}-{i} {i + 1} {1.0 / (i + 1)!r} t\n" for q in range(40) for i in range(30)]
    rows.append("q3 Q0 d3-5 99 0.0 t\n")  # query q3 again at the end, with a document it had
    (tmp_path / "s.trec").write_text("".join(rows))
    with pytest.raises(FrameValidationError, match="'d3-5' appears twice for query 'q3'"):
        read_run_arrow(tmp_path / "s.trec")
    (tmp_path / "t.trec").write_text("".join(rows[:-1]))
    fast = read_run_arrow(tmp_path / "t.trec")
    assert fast is not None and _normal(fast) == _normal(read_run_text(tmp_path / "t.trec"))


def test_progress_bars_and_atomic_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = pd.DataFrame({"qid": ["q"] * 3, "doc_id": ["a", "b", "c"], "score": [3.0, 2.0, 1.0]})
    write_run(run, tmp_path / "r.trec", progress=True)
    read_run(tmp_path / "r.trec", progress=True)
    err = capsys.readouterr().err
    assert "writing r.trec" in err and "reading r.trec" in err
    write_run(run, tmp_path / "q.trec")  # small: silent by default
    read_run(tmp_path / "q.trec")
    assert capsys.readouterr().err == ""
    before = (tmp_path / "r.trec").read_bytes()
    with pytest.raises(FrameValidationError):
        write_run(run.assign(doc_id=["a", "b c", "d"]), tmp_path / "r.trec")  # refused: the old file stays
    assert (tmp_path / "r.trec").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.trec", "r.trec"]  # no temporary file left


def test_hash_screen_of_duplicates_agrees_with_the_exact_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each query's documents are screened by their hashes over the parse blocks: a repeat
    inside one block, one across a block boundary, and a query split over two places are found
    as the general reader finds them (same message), and a clean file passes."""
    import pyarrow.csv as pcsv

    from kolm_search.io._arrow_trec import _duplicate, _exact_duplicate, _parse, _query_codes

    real = pcsv.ReadOptions

    def small_blocks(*args: object, **kwargs: object) -> object:
        kwargs["block_size"] = 1 << 16
        return real(*args, **kwargs)

    monkeypatch.setattr(pcsv, "ReadOptions", small_blocks)
    rng = np.random.default_rng(3)
    rows = [f"q{q} Q0 d{d} {i + 1} {1.0 / (i + 1)!r} t\n" for q in range(140)
            for i, d in enumerate(rng.permutation(10**6)[:500])]
    (tmp_path / "c.trec").write_text("".join(rows))
    table = _parse(tmp_path / "c.trec", False)
    assert table is not None and table.column("doc_id").num_chunks > 10
    q, runs, _ = _query_codes(table.column("qid"))
    assert len(runs) == 141  # one run per query, though the queries straddle blocks
    cut = len(table.column("doc_id").chunk(0))  # first row of the second block
    assert q[cut - 1] == q[cut + 1]
    cases = {"inside": (cut // 2, cut // 2 + 2), "across": (cut - 1, cut + 1), "moved": None}
    for name, pair in cases.items():
        lines = list(rows)
        if pair is None:  # query q7 comes back at the end with a document it had
            lines.append(lines[7 * 500 + 3].replace(" 4 ", " 999 "))
        else:
            fields = lines[pair[1]].split(" ")
            fields[2] = lines[pair[0]].split(" ")[2]
            lines[pair[1]] = " ".join(fields)
        (tmp_path / f"{name}.trec").write_text("".join(lines))
        parsed = _parse(tmp_path / f"{name}.trec", False)
        assert parsed is not None
        codes, starts, _ = _query_codes(parsed.column("qid"))
        doc = parsed.column("doc_id")
        assert _duplicate(codes, starts, doc, doc.combine_chunks()) == _exact_duplicate(codes, doc) is not None
        with pytest.raises(FrameValidationError, match="appears twice for query") as fast_error:
            read_run(tmp_path / f"{name}.trec")
        with pytest.raises(FrameValidationError) as general_error:
            read_run_text(tmp_path / f"{name}.trec")
        assert str(fast_error.value) == str(general_error.value), name
    assert _duplicate(q, runs, table.column("doc_id"), table.column("doc_id").combine_chunks()) is None
