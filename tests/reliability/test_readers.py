"""Readers on hostile files: every defect found by probing has its case here. Byte-order marks,
bad bytes and broken gzip in every text reader; surplus fields; numbers past int32/int64;
parquet columns of the wrong kind; JSON that is deep, huge or not Unicode."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import FrameValidationError, KolmError, evaluate
from kolm_search.io import load_beir, read_qrels, read_run, write_qrels, write_run

BOM = "\ufeff".encode()


def beir(root: Path, corpus: bytes, queries: bytes, qrels: bytes, gz: bool = False) -> Path:
    (root / "qrels").mkdir(parents=True)
    for name, body in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
        if gz:
            (root / f"{name}.gz").write_bytes(gzip.compress(body))
        else:
            (root / name).write_bytes(body)
    return root


CORPUS = b'{"_id": "d1", "title": "T", "text": "one"}\n{"_id": "d2", "text": "two"}\n'
QUERIES = b'{"_id": "q1", "text": "first"}\n'
QRELS = b"query-id\tcorpus-id\tscore\nq1\td1\t2\n"


@pytest.mark.parametrize("gz", [False, True])
def test_byte_order_marks_are_dropped_everywhere(tmp_path: Path, gz: bool) -> None:
    ds = load_beir(beir(tmp_path / "b", BOM + CORPUS, BOM + QUERIES, BOM + QRELS, gz))
    assert ds.corpus.id.tolist() == ["d1", "d2"] and ds.queries.qid.tolist() == ["q1"]
    assert ds.qrels.qid.astype(str).tolist() == ["q1"] and ds.qrels.relevance.tolist() == [2]
    suffix = ".gz" if gz else ""
    for name, body in (("r.trec", b"q1 Q0 a 1 1.5 t\n"), ("q.txt", b"q1 0 a 1\n"), ("h.tsv", QRELS)):
        data = BOM + body
        (tmp_path / (name + suffix)).write_bytes(gzip.compress(data) if gz else data)
    assert read_run(tmp_path / f"r.trec{suffix}").qid.astype(str).tolist() == ["q1"]
    assert read_qrels(tmp_path / f"q.txt{suffix}").qid.astype(str).tolist() == ["q1"]
    assert read_qrels(tmp_path / f"h.tsv{suffix}").qid.astype(str).tolist() == ["q1"]


def broken_variants(body: bytes) -> dict[str, tuple[str, bytes]]:
    """name -> (file suffix, bytes) of a file that cannot be read as text."""
    whole = gzip.compress(body * 400)
    return {"bad-utf8": ("", body + b"\xff\xfe oops\n"), "cut-gz": (".gz", whole[: len(whole) // 2]),
            "fake-gz": (".gz", body), "garbage-after-gz": (".gz", gzip.compress(body) + b"\x00junk")}


@pytest.mark.parametrize("variant", ["bad-utf8", "cut-gz", "fake-gz", "garbage-after-gz"])
@pytest.mark.parametrize("which", ["run", "qrels", "corpus", "queries", "beir-qrels"])
def test_unreadable_text_names_the_file(tmp_path: Path, which: str, variant: str) -> None:
    bodies = {"run": b"q1 Q0 a 1 1.5 t\n", "qrels": b"q1 0 a 1\n", "corpus": CORPUS, "queries": QUERIES,
              "beir-qrels": QRELS}
    suffix, data = broken_variants(bodies[which])[variant]
    if which in ("run", "qrels"):
        path = tmp_path / f"f.txt{suffix}"
        path.write_bytes(data)
        call: Callable[[], Any] = lambda: (read_run if which == "run" else read_qrels)(path)  # noqa: E731
    else:
        root = beir(tmp_path / "b", CORPUS, QUERIES, QRELS)
        name = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "beir-qrels": "qrels/test.tsv"}[which]
        (root / name).unlink()
        path = root / f"{name}{suffix}"
        path.write_bytes(data)
        call = lambda: load_beir(root)  # noqa: E731
    with pytest.raises(FrameValidationError) as info:
        call()
    assert path.name in str(info.value)
    if variant == "bad-utf8":
        assert f"{path.name}:" in str(info.value)  # and the line


@pytest.mark.parametrize("text, match", [
    ("q1 Q0 a 1 1.5 t extra\n", r"r.trec:1: expected 6 fields"),  # pandas made the surplus field the index
    ('q1 Q0 "a b" 1 1.5 t\n', r"r.trec:1: expected 6 fields"),  # quotes are characters, not grouping
    ("q1 Q0 a 99999999999999999999 1.5 t\n", r"r.trec:1: rank .* int64"),  # bare OverflowError before
    ("q1 Q0 a 1 1_5 t\n", r"r.trec:1: score '1_5'"),  # Python's float() reads 15
    ("q1 Q0 a \u0661 1.5 t\n", r"r.trec:1: rank"),  # an Arabic-Indic digit is not a rank
])
def test_bad_run_lines(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "r.trec").write_bytes(text.encode())
    with pytest.raises(FrameValidationError, match=match):
        read_run(tmp_path / "r.trec")


@pytest.mark.parametrize("grade", ["9223372036854775807", "9223372036854775808", "-9223372036854775809",
                                   "99999999999999999999999", "2147483648", "-2147483649", "1e10"])
def test_grades_outside_int32_are_refused_with_file_and_line(tmp_path: Path, grade: str) -> None:
    (tmp_path / "q.txt").write_text(f"q1 0 b 1\nq1 0 a {grade}\n")
    with pytest.raises(FrameValidationError, match=r"q.txt:2: relevance .* int32"):
        read_qrels(tmp_path / "q.txt")
    (tmp_path / "q.txt").write_text("q1 0 a 1 extra\n")  # a surplus field
    with pytest.raises(FrameValidationError, match=r"q.txt:1: expected 3 or 4 fields"):
        read_qrels(tmp_path / "q.txt")


def test_grades_at_int32_limits_are_kept_and_scored(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("q1 0 a 2147483647\nq1 0 b -2147483648\nq1 0 c 1.0\n")
    qrels = read_qrels(tmp_path / "q.txt")
    assert qrels.relevance.tolist() == [2**31 - 1, -(2**31), 1]
    run = pd.DataFrame({"qid": ["q1"] * 3, "doc_id": ["a", "b", "c"], "score": [3.0, 2.0, 1.0]})
    assert evaluate(run, qrels, ["P@1"])["P@1"] == 1.0  # the huge grade is relevant, not wrapped
    assert evaluate(run, qrels, ["P@1"])["P@1"] == 1.0  # and the next call still works


@pytest.mark.parametrize("reader, columns, match", [
    (read_qrels, {"qid": ["1"], "doc_id": ["a"]}, "relevance"),
    (read_qrels, {"qid": [["1"]], "doc_id": ["a"], "relevance": [1]}, "qid .*strings or integers"),
    (read_run, {"qid": [b"1"], "doc_id": ["a"], "score": [1.0]}, "qid .*strings or integers"),
    (read_run, {"qid": ["1"], "doc_id": [1.5], "score": [1.0]}, "doc_id .*strings or integers"),
    (read_run, {"qid": ["1"], "doc_id": ["a"], "score": ["1.0"]}, "score has dtype"),
    (read_run, {"qid": ["1"], "doc_id": ["a"], "score": [True]}, "score has dtype"),
    (read_run, {"qid": ["1"], "doc_id": ["a"], "score": [1.0], "rank": [1.5]}, "rank must be integers"),
    (read_run, {"qid": ["1"], "doc_id": ["a"], "score": [1.0], "rank": [1e30]}, "rank must be integers"),
    (read_run, {"qid": ["1", "1"], "doc_id": ["a", "b"], "score": [1.0, 2.0],
                "rank": pd.array([1, None], dtype="Int64")}, "missing rank"),
    (read_qrels, {"qid": ["1", "1"], "doc_id": ["a", "b"], "relevance": pd.array([1, None], dtype="Int64")},
     "relevance"),  # NA became int64's minimum, a silent non-relevant judgement
    (read_qrels, {"qid": ["1"], "doc_id": ["a"], "relevance": ["1"]}, "relevance has dtype"),
    (read_qrels, {"qid": ["1"], "doc_id": ["a"], "relevance": np.array([2**64 - 1], np.uint64)}, "int32|within"),
])
def test_parquet_columns_and_dtypes_are_checked(tmp_path: Path, reader: Any, columns: dict, match: str) -> None:
    pd.DataFrame(columns).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(FrameValidationError, match=match) as info:
        reader(tmp_path / "x.parquet")
    assert "x.parquet" in str(info.value)


def test_parquet_of_good_kinds_is_read(tmp_path: Path) -> None:
    run = pd.DataFrame({"qid": pd.Categorical(["q", "q"]), "doc_id": [7, 8], "score": np.float32([1, 2]),
                        "rank": np.uint8([1, 0])})
    run.to_parquet(tmp_path / "r.parquet")
    back = read_run(tmp_path / "r.parquet")
    assert back.doc_id.tolist() == [7, 8] and back["rank"].tolist() == [1, 0] and back.score.tolist() == [1.0, 2.0]


def test_nullable_grades_with_missing_values_are_refused_in_memory() -> None:
    run = pd.DataFrame({"qid": ["q"], "doc_id": ["a"], "score": [1.0]})
    for dtype in ("Int64", "int64[pyarrow]"):
        qrels = pd.DataFrame({"qid": ["q", "q"], "doc_id": ["a", "b"], "relevance": pd.array([1, None], dtype=dtype)})
        with pytest.raises(FrameValidationError, match="relevance"):
            evaluate(run, qrels, ["ndcg@10"])


@pytest.mark.parametrize("line, match", [
    ('{"_id": "d9", "text": "x", "title": 5}', "'title' that is not a string"),
    ("[" * 50_000, "invalid JSON"),  # RecursionError before
    ('{"_id": ' + "9" * 5000 + ', "text": "x"}', "invalid JSON"),  # ValueError (int digits limit) before
    ('{"_id": "d9", "text": "a\\ud800b"}', "lone surrogate"),  # pandas' Arrow strings failed on it
    ('{"_id": "\\udfff", "text": "x"}', "lone surrogate"),
])
def test_bad_json_lines_name_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    root = beir(tmp_path / "b", CORPUS + line.encode() + b"\n", QUERIES, QRELS)
    with pytest.raises(FrameValidationError, match=match) as info:
        load_beir(root)
    assert "corpus.jsonl:3" in str(info.value)


def test_surrogate_pairs_in_json_are_text(tmp_path: Path) -> None:
    line = json.dumps({"_id": "d\U0001f600", "text": "smile \U0001f600"}).encode()  # written as \ud83d\ude00
    assert b"\\ud83d" in line
    ds = load_beir(beir(tmp_path / "b", CORPUS + line + b"\n", QUERIES, QRELS))
    assert ds.corpus.id.tolist()[-1] == "d\U0001f600" and ds.corpus.content.tolist()[-1] == "smile \U0001f600"


def test_every_reader_error_is_a_kolm_error(tmp_path: Path) -> None:
    (tmp_path / "dir.trec").mkdir()
    for call in (lambda: read_run(tmp_path / "dir.trec"), lambda: read_qrels(tmp_path / "nope.txt"),
                 lambda: load_beir(tmp_path / "nope")):
        with pytest.raises(KolmError):
            call()


@pytest.mark.parametrize("body", [
    b"\xef\xbb\xbf\xef\xbb\xbfq Q0 a 1 1 t\n",  # two marks: one is dropped, the second is part of the id
    b"q Q0 a\xc2\xa0b 1 1 t\n",  # a no-break space is not a separator
    b"q Q0 a\x0bb 1 1 t\n",  # nor a vertical tab
    b"q Q0 a 1 1 t\rq Q0 b 2 0.5 t\n",  # a lone \r ends a line
    b"  q\tQ0 a 1 1 t \n\n \t\n",  # leading and trailing blanks, blank lines
    b"q Q0 a 1.0 +1 t\nq Q0 b 2e0 -.5 t\n",  # integral decimals as ranks
])
def test_fast_and_line_by_line_paths_agree(tmp_path: Path, body: bytes) -> None:
    """pandas' C reader and the line-by-line reader (used when the first fails) read one format."""
    from kolm_search.io.trec import _scan_run

    (tmp_path / "r.trec").write_bytes(body)
    fast = read_run(tmp_path / "r.trec")
    slow = _scan_run(tmp_path / "r.trec")
    pd.testing.assert_frame_equal(fast.astype({"qid": object, "doc_id": object}),
                                  slow.astype({"qid": object, "doc_id": object}))


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("reader, body, match", [
    (read_qrels, b"q\td\t\x0b0\n", r":1: relevance '\\x0b0' is not an integer"),  # BEIR tsv (a fuzz case)
    (read_qrels, b"q 0 d 1\nq 0 e 2\x0c\n", r":2: relevance '2\\x0c' is not an integer"),
    (read_run, b"q Q0 d \x0b1 1.5 t\n", r":1: rank '\\x0b1' is not an integer"),
    (read_run, b"q Q0 d 1 1.5\x0c t\n", r":1: score '1.5\\x0c' is not a number"),
])
def test_a_number_beside_a_vertical_tab_or_form_feed_is_refused(tmp_path: Path, reader: Any, body: bytes, match: str,
                                                                gz: bool) -> None:
    """Fields are split at spaces and tabs only; pandas' C reader read ``"\\v1"`` as 1 where the
    line-by-line reader (and the fuzz test's reference) refuses it: both paths now refuse it."""
    path = tmp_path / ("f.txt.gz" if gz else "f.txt")
    path.write_bytes(gzip.compress(body) if gz else body)
    with pytest.raises(FrameValidationError, match=match):
        reader(path)


def test_beir_folder_in_parquet_reads_as_the_jsonl_one(tmp_path: Path) -> None:
    text = load_beir(beir(tmp_path / "text", CORPUS, QUERIES, QRELS))
    root = tmp_path / "pq"
    (root / "qrels").mkdir(parents=True)
    pd.DataFrame({"_id": ["d1", "d2"], "title": ["T", None], "text": ["one", "two"]}).to_parquet(root / "corpus.parquet")
    pd.DataFrame({"_id": ["q1"], "text": ["first"]}).to_parquet(root / "queries.parquet")
    pd.DataFrame({"qid": ["q1"], "doc_id": ["d1"], "relevance": [2]}).to_parquet(root / "qrels" / "test.parquet")
    pq = load_beir(root)
    pd.testing.assert_frame_equal(pq.corpus, text.corpus, check_dtype=False)
    pd.testing.assert_frame_equal(pq.queries, text.queries, check_dtype=False)
    pd.testing.assert_frame_equal(pq.qrels.astype(str), text.qrels.astype(str))


@pytest.mark.parametrize("which, columns, match", [
    ("corpus", {"_id": ["d1"], "title": ["T"]}, r"lacks column\(s\) \['text'\]"),
    ("corpus", {"_id": [1.5], "text": ["x"]}, "'_id' row 0"),
    ("corpus", {"_id": [""], "text": ["x"]}, "'_id' row 0"),
    ("corpus", {"_id": [b"d"], "text": ["x"]}, "'_id' row 0"),
    ("corpus", {"_id": ["d1", "d2"], "text": ["x", None]}, "'text' row 1"),
    ("corpus", {"_id": ["d1"], "text": ["x"], "title": [5]}, "'title' row 0"),
    ("corpus", {"_id": ["d1", "d1"], "text": ["x", "y"]}, "duplicate document id 'd1'"),
    ("queries", {"_id": [1, 1], "text": ["x", "y"]}, "duplicate query id '1'"),
    ("queries", {"_id": ["q"], "text": [3]}, "'text' row 0"),
])
def test_beir_parquet_columns_are_checked(tmp_path: Path, which: str, columns: dict, match: str) -> None:
    root = beir(tmp_path / "b", CORPUS, QUERIES, QRELS)
    (root / f"{which}.jsonl").unlink()
    pd.DataFrame(columns).to_parquet(root / f"{which}.parquet")
    with pytest.raises(FrameValidationError, match=match) as info:
        load_beir(root)
    assert f"{which}.parquet" in str(info.value)
    (root / f"{which}.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(FrameValidationError, match=f"{which}.parquet"):
        load_beir(root)


WRITE_IDS = st.one_of(st.text(min_size=0, max_size=5), st.integers(-5, 10**6), st.binary(max_size=3),
                      st.sampled_from(["query-id", "qid", "\ufeffq", "a b", "\ud800", "x\ry"]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(WRITE_IDS, WRITE_IDS, st.floats(allow_nan=False, allow_infinity=False),
                          st.integers(-3, 5)), min_size=1, max_size=6, unique_by=lambda r: (str(r[0]), str(r[1]))),
       st.sampled_from(["", ".gz", ".parquet"]), st.booleans())
def test_written_files_read_back_exactly_or_are_refused(tmp_path: Path, rows: list, suffix: str, run: bool) -> None:
    """write_run/write_qrels then read_run/read_qrels: the same rows (ids as text), or a clear
    error before anything is written. A first query called "qid" is not mistaken for a header."""
    from hypothesis import assume

    qids = pd.Series([r[0] for r in rows], dtype=object)
    docs = pd.Series([r[1] for r in rows], dtype=object)
    frame = pd.DataFrame({"qid": qids, "doc_id": docs})
    if run:
        frame["score"], frame["rank"] = [r[2] for r in rows], range(len(rows))
    else:
        frame["relevance"] = [r[3] for r in rows]
    path = tmp_path / f"{time.monotonic_ns()}.txt{suffix}"
    write, read = (write_run, read_run) if run else (write_qrels, read_qrels)
    try:
        write(frame, path)
    except KolmError:
        assert not path.exists()
        return
    if suffix == ".parquet":  # parquet keeps types: only mixed columns are refused (by pyarrow)
        assume(False)
    back = read(path)
    value = ["score", "rank"] if run else ["relevance"]
    want = [(str(q), str(d), *v) for q, d, *v in frame[["qid", "doc_id", *value]].itertuples(index=False, name=None)]
    got = list(zip(back.qid.astype(object), back.doc_id.astype(object), *(back[c].tolist() for c in value), strict=True))
    assert got == want


@pytest.mark.parametrize("grades", [np.array([2**63 - 1, 1], np.int64), np.array([-(2**63), 1], np.int64),
                                    np.array([2**64 - 1, 1], np.uint64), np.array([2**70, 1], dtype=object),
                                    np.array([9.3e18, 1.0]), np.array([2**31, 1], np.int64)])
def test_grades_near_int64_limits_are_refused_never_scored_as_non_relevant(grades: np.ndarray) -> None:
    run = pd.DataFrame({"qid": ["q", "q"], "doc_id": ["a", "b"], "score": [2.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["q", "q"], "doc_id": ["a", "b"], "relevance": grades})
    for _ in range(2):  # and the next call fails the same way (no SystemError afterwards)
        with pytest.raises(FrameValidationError, match="relevance .*row 0"):
            evaluate(run, qrels, ["P@1", "ndcg@10"])
    assert evaluate(run, qrels.assign(relevance=[1, 0]), ["P@1"]) == {"P@1": 1.0}


def test_rank_at_int64_minimum_is_refused_not_wrapped(tmp_path: Path) -> None:
    (tmp_path / "r.trec").write_text("q Q0 a -9223372036854775808 1.0 t\n")  # minus one wrapped to int64's maximum
    with pytest.raises(FrameValidationError, match=r"r.trec:1: rank .* int64"):
        read_run(tmp_path / "r.trec")
    (tmp_path / "r.trec").write_text("q Q0 a -9223372036854775807 1.0 t\n")
    assert read_run(tmp_path / "r.trec")["rank"].tolist() == [-(2**63)]
