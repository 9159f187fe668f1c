"""Streaming BM25 builds (BM25Retriever.build): the same index as an in-memory build, for every
input kind and any chunk size; bad input refused by place before anything is written."""

from __future__ import annotations

import errno
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search.errors import FrameValidationError, KolmError
from kolm_search.io.beir import load_beir
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.spill import gather_ranges

WORDS = ["apple", "pear", "ships", "boats", "sea", "lamp", "pearl", "the", "of", "river", "stone", "glass"]
ARRAYS = ("t_ptr", "t_docs", "t_w", "nonocc", "doc_len", "tf", "t_min", "t_max", "b_max", "b_last")
QUERIES = ["apple sea", "ships of the river", "glass pearl stone", "lamp", "nothing here"]

texts = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)
titles = st.one_of(st.none(), st.sampled_from(["Sea", "Apple pie", ""]))
corpora = st.lists(st.tuples(texts, titles), max_size=12).map(
    lambda rows: [{"id": f"d{i}", "content": t, "title": h} for i, (t, h) in enumerate(rows)])
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _same(built: BM25Retriever, oracle: BM25Retriever) -> None:
    assert built.vocab == oracle.vocab
    for name in ARRAYS:
        a, b = np.asarray(getattr(built, name)), np.asarray(getattr(oracle, name))
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    pd.testing.assert_frame_equal(built.table.frame, oracle.table.frame)
    if len(oracle.table):
        for got, want in zip(built.score_texts(QUERIES, 5), oracle.score_texts(QUERIES, 5), strict=True):
            np.testing.assert_array_equal(got, want)


def _saved(oracle: BM25Retriever, root: Path) -> BM25Retriever:
    """The in-memory index as save and load give it back (tags and metadata through JSON)."""
    oracle.save(root / "oracle")
    return BM25Retriever.load(root / "oracle", mmap=False)


def _write_jsonl(path: Path, docs: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps({"_id": d["id"], "title": d["title"] or "", "text": d["content"]}) + "\n" for d in docs)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(lines)
    else:
        path.write_text(lines, encoding="utf-8")


def _no_leftovers(root: Path, *keep: str) -> None:
    assert sorted(p.name for p in root.iterdir()) == sorted(keep)


@SETTINGS
@given(docs=corpora, chunk=st.integers(1, 5), method=st.sampled_from(["lucene", "bm25l", "bm25+"]),
       limit=st.sampled_from([64, 10_000, None]))
def test_dicts_equal_the_in_memory_build(tmp_path_factory: Any, docs: list[dict[str, Any]], chunk: int,
                                         method: str, limit: int | None) -> None:
    root = tmp_path_factory.mktemp("dicts")
    oracle = _saved(BM25Retriever(docs, method=method), root)
    built = BM25Retriever.build(iter(docs), root / "ix", chunk_size=chunk, memory_limit=limit, method=method,
                                progress=False)
    _same(built, oracle)
    _no_leftovers(root, "ix", "oracle")


@SETTINGS
@given(docs=corpora, chunk=st.integers(1, 5), gz=st.booleans(), folder=st.booleans())
def test_jsonl_and_beir_folder_equal_the_in_memory_build(tmp_path_factory: Any, docs: list[dict[str, Any]],
                                                         chunk: int, gz: bool, folder: bool) -> None:
    root = tmp_path_factory.mktemp("jsonl")
    (root / "beir" / "qrels").mkdir(parents=True)
    corpus = root / "beir" / ("corpus.jsonl.gz" if gz else "corpus.jsonl")
    _write_jsonl(corpus, docs)
    _write_jsonl(root / "beir" / "queries.jsonl", [{"id": "q1", "title": None, "content": "apple"}])
    (root / "beir" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    oracle = _saved(BM25Retriever(load_beir(root / "beir").corpus), root)
    built = BM25Retriever.build(root / "beir" if folder else corpus, root / "ix", chunk_size=chunk, progress=False)
    _same(built, oracle)
    _no_leftovers(root, "beir", "ix", "oracle")


@SETTINGS
@given(docs=corpora, chunk=st.integers(1, 5), group=st.integers(1, 4), beir=st.booleans())
def test_parquet_equals_the_in_memory_build(tmp_path_factory: Any, docs: list[dict[str, Any]], chunk: int,
                                            group: int, beir: bool) -> None:
    root = tmp_path_factory.mktemp("parquet")
    frame = pd.DataFrame(docs, columns=["id", "content", "title"])
    if beir:
        frame = frame.rename(columns={"id": "_id", "content": "text"})
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), root / "corpus.parquet", row_group_size=group)
    if beir:
        oracle_docs: Any = pd.DataFrame({"id": frame["_id"], "content": frame["text"],
                                         "title": frame["title"].map(lambda t: t or None)})
    else:
        oracle_docs = pd.read_parquet(root / "corpus.parquet")
    oracle = _saved(BM25Retriever(oracle_docs), root)
    built = BM25Retriever.build(root / "corpus.parquet", root / "ix", chunk_size=chunk, progress=False)
    _same(built, oracle)


@SETTINGS
@given(docs=corpora, chunk=st.integers(1, 5), frames=st.integers(1, 3))
def test_tsv_and_dataframe_chunks_equal_the_in_memory_build(tmp_path_factory: Any, docs: list[dict[str, Any]],
                                                            chunk: int, frames: int) -> None:
    root = tmp_path_factory.mktemp("tsv")
    (root / "collection.tsv").write_text("".join(f"{d['id']}\t{d['content']}\n" for d in docs), encoding="utf-8")
    oracle = _saved(BM25Retriever([{"id": d["id"], "content": d["content"]} for d in docs]), root)
    _same(BM25Retriever.build(root / "collection.tsv", root / "ix", chunk_size=chunk, progress=False), oracle)
    frame = pd.DataFrame(docs, columns=["id", "content", "title"])
    parts = np.array_split(np.arange(len(frame)), frames)
    oracle = _saved(BM25Retriever(frame), root)
    built = BM25Retriever.build((frame.iloc[p] for p in parts), None, chunk_size=chunk, progress=False)
    _same(built, oracle)


def test_tags_metadata_and_source_survive(tmp_path: Path) -> None:
    docs = [{"id": "a", "content": "apple sea", "tags": ["x", "y"], "metadata": {"year": 2001}, "source": "s"},
            {"id": "b", "content": "ships", "metadata": {"year": 1999, "who": {"n": 1}}}]
    oracle = _saved(BM25Retriever(docs), tmp_path)
    built = BM25Retriever.build(docs, tmp_path / "ix", chunk_size=1, progress=False)
    _same(built, oracle)
    assert built.table.filter_mask({"year": {"$gt": 2000}}).tolist() == [True, False]


def test_empty_corpus(tmp_path: Path) -> None:
    built = BM25Retriever.build([], tmp_path / "ix", progress=False)
    _same(built, _saved(BM25Retriever([]), tmp_path))


def test_gather_ranges_against_concatenated_aranges() -> None:
    rng = np.random.default_rng(0)
    starts, lengths = rng.integers(0, 50, 20), rng.integers(0, 6, 20)
    want = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths, strict=True)])
    np.testing.assert_array_equal(gather_ranges(starts, lengths), want)


# -- bad input: refused by place, nothing written, nothing left -------------------------------

def _refused(tmp_path: Path, source: Any, match: str, chunk: int = 2) -> None:
    target = tmp_path / "ix"
    with pytest.raises(FrameValidationError, match=match):
        BM25Retriever.build(source, target, chunk_size=chunk, progress=False)
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ix")]


@pytest.mark.parametrize("line, match", [
    ('{"_id": "d9", "text": "broken', r"corpus\.jsonl:4: invalid JSON"),
    ('{"_id": "d9", "text": 7}', r"corpus\.jsonl:4: document 'd9' has no string 'text'"),
    ('{"_id": "d9"}', r"corpus\.jsonl:4: document 'd9' has no string 'text'"),
    ('{"_id": "d0", "text": "sea"}', r"corpus\.jsonl: line 4: duplicate document id 'd0' \(first at .*line 1\)"),
    ('{"_id": "d2", "text": "sea"}', r"corpus\.jsonl: line 4: duplicate document id 'd2' \(first at .*line 3\)"),
])
def test_bad_jsonl_lines_are_refused_by_line(tmp_path: Path, line: str, match: str) -> None:
    good = "".join(json.dumps({"_id": f"d{i}", "text": "apple sea"}) + "\n" for i in range(3))
    (tmp_path / "corpus.jsonl").write_text(good + line + "\n" + json.dumps({"_id": "d5", "text": "x"}) + "\n")
    _refused(tmp_path, tmp_path / "corpus.jsonl", match)
    _refused(tmp_path, tmp_path / "corpus.jsonl", match, chunk=1)


def test_bad_parquet_is_refused_by_row_group(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c", "a"], "content": ["x", "y", "z", "w"]}), path, row_group_size=2)
    _refused(tmp_path, path, r"c\.parquet row group 1: row 1: duplicate document id 'a' \(first at .*row group 0: row 0\)")
    pq.write_table(pa.table({"id": ["a", "b", "c"], "content": ["x", None, "z"]}), path, row_group_size=2)
    _refused(tmp_path, path, r"c\.parquet row group 0: row 1: 'content' is missing")
    pq.write_table(pa.table({"id": ["a", "b"], "content": [1, 2]}), path)
    _refused(tmp_path, path, r"c\.parquet row group 0: column 'content' has type int64")
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["x", "y"]}), path)
    _refused(tmp_path, path, r"lacks column\(s\) \['content'\]")


def test_bad_tsv_and_documents_are_refused_by_place(tmp_path: Path) -> None:
    (tmp_path / "c.tsv").write_text("a\tapple\nb apple\n")
    _refused(tmp_path, tmp_path / "c.tsv", r"c\.tsv:2: expected 'id<TAB>text'")
    _refused(tmp_path, [{"id": "a", "content": "x"}, {"id": "b", "content": 3}], r"documents: document 1")
    _refused(tmp_path, [{"id": "a", "content": "x"}, {"id": "b", "content": "y"}, {"id": "a", "content": "z"}],
             r"documents: document 2: duplicate document id 'a' \(first at documents: document 0\)", chunk=1)


def test_a_failed_build_keeps_the_old_index(tmp_path: Path) -> None:
    docs = [{"id": "a", "content": "apple"}, {"id": "b", "content": "sea"}]
    BM25Retriever.build(docs, tmp_path / "ix", progress=False)
    before = sorted(p.name for p in (tmp_path / "ix").iterdir())
    with pytest.raises(FrameValidationError):
        BM25Retriever.build([*docs, {"id": "a", "content": "again"}], tmp_path / "ix", chunk_size=1, progress=False)
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == before
    assert len(BM25Retriever.load(tmp_path / "ix").table) == 2
    _no_leftovers(tmp_path, "ix")


def test_a_build_that_fails_while_saving_leaves_no_index_and_no_temp_files(tmp_path: Path, monkeypatch: Any) -> None:
    from kolm_search.retrievers import _persist

    def fail(label: str) -> None:
        if label == "manifest written":
            raise OSError("disk full")

    monkeypatch.setattr(_persist, "_step_hook", fail)
    with pytest.raises(Exception, match="disk full"):
        BM25Retriever.build([{"id": "a", "content": "apple"}], tmp_path / "ix", chunk_size=1, progress=False)
    assert not (tmp_path / "ix").exists()  # the folder the save made goes with it
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("error, match", [
    (MemoryError(), r"ix: the build ran out of memory \(memory_limit=4,096 bytes"),
    (OSError(errno.ENOSPC, "No space left on device"), r"the build ran out of disk space"),
    (OSError(errno.EIO, "Input/output error"), r"the build failed on disk: .*Input/output error"),
])
def test_a_build_out_of_memory_or_disk_says_which_and_leaves_the_index(tmp_path: Path, monkeypatch: Any,
                                                                        error: BaseException, match: str) -> None:
    from kolm_search.retrievers import spill

    docs = [{"id": "a", "content": "apple"}, {"id": "b", "content": "banana"}]
    BM25Retriever.build(docs, tmp_path / "ix", progress=False)
    before = {p.name: p.read_bytes() for p in (tmp_path / "ix").iterdir()}

    def spilling(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(spill.SpilledPostings, "add_counted", spilling)
    with pytest.raises(KolmError, match=match):
        BM25Retriever.build([*docs, {"id": "c", "content": "cherry"}], tmp_path / "ix", memory_limit=4096,
                            progress=False)
    assert {p.name: p.read_bytes() for p in (tmp_path / "ix").iterdir()} == before
    _no_leftovers(tmp_path, "ix")


def test_progress_bars_count_documents_then_postings(tmp_path: Path, monkeypatch: Any) -> None:
    from kolm_search.retrievers import stream_build, stream_count

    seen: list[tuple[Any, str, str]] = []
    real = stream_build.progress_bar

    def spy(total: Any, desc: str, unit: str, **kw: Any) -> Any:
        seen.append((total, desc, unit))
        return real(total, desc, unit, **kw)

    monkeypatch.setattr(stream_build, "progress_bar", spy)
    monkeypatch.setattr(stream_count, "progress_bar", spy)  # the read phase
    built = BM25Retriever.build([{"id": "a", "content": "apple sea"}, {"id": "b", "content": "sea"}], tmp_path / "ix",
                                progress=True)
    assert seen == [(None, "bm25 build: read", "doc"), (len(built.t_docs), "bm25 build: weigh", "posting")]


def test_a_parquet_folder_and_a_gzipped_tsv(tmp_path: Path) -> None:
    docs = [{"id": f"d{i}", "content": " ".join(WORDS[i % 7:i % 7 + 3])} for i in range(9)]
    (tmp_path / "pq").mkdir()
    for k, part in enumerate((docs[:4], docs[4:])):  # the files in name order
        pq.write_table(pa.Table.from_pylist(part), tmp_path / "pq" / f"part-{k}.parquet", row_group_size=3)
    with gzip.open(tmp_path / "c.tsv.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(f"{d['id']}\t{d['content']}\n" for d in docs)
    oracle = _saved(BM25Retriever(docs), tmp_path)
    _same(BM25Retriever.build(tmp_path / "pq", tmp_path / "a", chunk_size=2, progress=False), oracle)
    _same(BM25Retriever.build(tmp_path / "c.tsv.gz", tmp_path / "b", chunk_size=2, progress=False), oracle)


def test_a_killed_build_leaves_a_folder_that_the_next_build_removes(tmp_path: Path) -> None:
    """A build killed outright (SIGKILL: no ``finally`` runs) leaves its spill folder; the next
    build of the same target removes it once it is a minute old, and keeps the folder of a build
    still running (its owner lock held) and one just made."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import filelock

    target = tmp_path / "index"
    script = (
        "import time\n"
        "from kolm_search.retrievers.bm25 import BM25Retriever\n"
        "def docs():\n"
        "    for i in range(50):\n"
        "        yield {'id': f'd{i}', 'content': 'some words here'}\n"
        "    print('reading', flush=True)\n"
        "    time.sleep(600)\n"
        f"BM25Retriever.build(docs(), {str(target)!r}, chunk_size=10)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "reading"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (dead,) = tmp_path.glob(".index.building-*")
    running = tmp_path / ".index.building-running"
    fresh = tmp_path / ".index.building-fresh"
    running.mkdir()
    fresh.mkdir()
    old = time.time() - 3600
    for folder in (dead, running):
        os.utime(folder, (old, old))
    held = filelock.FileLock(str(running / "owner.lock"))
    held.acquire()
    try:
        BM25Retriever.build([{"id": "a", "content": "x y"}], target)
    finally:
        held.release()
    assert not dead.exists() and running.is_dir() and fresh.is_dir()
    assert len(BM25Retriever.load(target).table) == 1
