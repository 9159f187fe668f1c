"""Loaded arrays agree with each other (issue 25, defect 8): the weights a BM25 index serves are
those of the term frequencies it saved (which ``add`` and ``delete`` re-weight from), with the
index's own collection statistics, bit for bit; otherwise ``load`` refuses it naming the files.

Before the fix a ``tf.npy`` altered to keep each document's total loaded, and the next ``add``
re-weighted every posting from it: 0.226 where a rebuild gives 0.341.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmValueError
from kolm_search.retrievers.postings import Postings
from tests.reliability.indexes import file_of, reseal

DOCS = pd.DataFrame({"id": [f"d{i}" for i in range(8)],
                     "content": ["alpha alpha beta", "alpha beta beta gamma", "gamma delta", "alpha delta delta delta",
                                 "beta gamma gamma", "omega alpha", "delta omega omega", "beta beta alpha gamma"]})


def _swap_counts_within_a_document(tf: np.ndarray, t_docs: np.ndarray) -> tuple[int, int]:
    """Two postings of one document whose counts differ; their counts swapped (totals kept)."""
    for doc in range(int(t_docs.max()) + 1):
        pos = np.flatnonzero(t_docs == doc)
        for i in pos:
            for j in pos:
                if tf[i] != tf[j]:
                    tf[[i, j]] = tf[[j, i]]
                    return int(i), int(j)
    raise AssertionError("no document with two different counts")


def test_tampered_term_frequencies_that_keep_each_document_total_are_refused(tmp_path: Path) -> None:
    BM25Retriever(DOCS).save(tmp_path)
    path = file_of(tmp_path, "tf")
    tf = np.load(path)
    _swap_counts_within_a_document(tf, np.load(file_of(tmp_path, "t_docs")))
    np.save(path, tf)
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: content differs from the sha256"):
        BM25Retriever.load(tmp_path)
    reseal(tmp_path)  # the manifest rewritten to match: the arrays themselves disagree
    with pytest.raises(KolmValueError, match=r"t_w\.[0-9a-f]{32}\.npy: weight at position \d+ is [\d.]+, but "
                                             r"tf\.[0-9a-f]{32}\.npy, doc_len\.[0-9a-f]{32}\.npy and the collection "
                                             r"statistics give [\d.]+ \(lucene"):
        BM25Retriever.load(tmp_path)


@pytest.mark.parametrize("method", ["bm25+", "bm25l"])
def test_tampered_non_occurrence_constants_are_refused(tmp_path: Path, method: str) -> None:
    BM25Retriever(DOCS, method=method).save(tmp_path)  # type: ignore[arg-type]
    path = file_of(tmp_path, "nonocc")
    a = np.load(path)
    a[2] *= np.float32(1.5)
    np.save(path, a)
    reseal(tmp_path)
    with pytest.raises(KolmValueError, match=r"nonocc\.[0-9a-f]{32}\.npy: value at position 2 is .* but the document "
                                             "frequencies give"):
        BM25Retriever.load(tmp_path)


def _rebuilt(ret: BM25Retriever) -> BM25Retriever:
    """The index weighted afresh from the loaded counts (what a merge does)."""
    post = Postings(vocab=list(ret.vocab), t_ptr=np.asarray(ret.t_ptr), p_doc=np.asarray(ret.t_docs),
                    tf=np.asarray(ret.tf), lengths=np.asarray(ret.doc_len))
    return BM25Retriever(ret.table, method=ret.method, k1=ret.k1, b=ret.b, delta=ret.delta, tokenizer=ret.tokenizer,
                         postings=post)


TAMPER = st.sampled_from(["swap_tf", "tf_and_length", "t_w", "t_w_last_bit", "doc_len_and_tf", "k1", "none"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=TAMPER, method=st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]), seed=st.integers(0, 10**6))
def test_a_loaded_index_serves_the_weights_of_its_counts(tmp_path_factory: pytest.TempPathFactory, how: str,
                                                           method: str, seed: int) -> None:
    """Any tampering of the counts, lengths, weights or parameters (the manifest resealed to
    match): either ``load`` refuses it naming a file, or the loaded weights equal, bit for bit,
    those a merge would compute from the loaded counts (a count of a term whose idf is 0 can
    change unseen: it weighs nothing either way)."""
    import json

    rng = np.random.default_rng(seed)
    base = tmp_path_factory.mktemp("base")
    BM25Retriever(DOCS, method=method).save(base)  # type: ignore[arg-type]
    d = tmp_path_factory.mktemp("tampered")
    shutil.rmtree(d)
    shutil.copytree(base, d)
    tf, t_docs = np.load(file_of(d, "tf")), np.load(file_of(d, "t_docs"))
    if how == "swap_tf":
        _swap_counts_within_a_document(tf, t_docs)
    elif how in ("tf_and_length", "doc_len_and_tf"):  # a count and its document's length, both raised
        i = int(rng.integers(0, len(tf)))
        tf[i] += 1
        doc_len = np.load(file_of(d, "doc_len"))
        doc_len[t_docs[i]] += 1
        np.save(file_of(d, "doc_len"), doc_len)
    elif how in ("t_w", "t_w_last_bit"):
        t_w = np.load(file_of(d, "t_w"))
        i = int(rng.integers(0, len(t_w)))
        t_w[i] = np.nextafter(t_w[i], np.float32(np.inf)) if how == "t_w_last_bit" else t_w[i] * np.float32(0.66)
        np.save(file_of(d, "t_w"), t_w)
    elif how == "k1":
        body = json.loads((d / "manifest.json").read_text())
        body["config"]["k1"] = 1.2
        (d / "manifest.json").write_text(json.dumps(body))
    np.save(file_of(d, "tf"), tf)
    reseal(d)
    try:
        loaded = BM25Retriever.load(d)
    except KolmValueError as exc:
        assert how != "none" and ".npy" in str(exc), exc
        return
    again = _rebuilt(loaded)  # loaded: only if the tampering kept weights and counts in agreement
    np.testing.assert_array_equal(np.asarray(loaded.t_w), again.t_w)
    np.testing.assert_array_equal(np.asarray(loaded.nonocc), again.nonocc)


def test_an_add_after_load_equals_a_rebuild(tmp_path: Path) -> None:
    """The reason for the check: ``add`` re-weights from the saved counts; with counts that agree
    with the weights its scores are a rebuild's."""
    BM25Retriever(DOCS.iloc[:6]).save(tmp_path)
    loaded = BM25Retriever.load(tmp_path)
    loaded.add(DOCS.iloc[6:])
    rebuilt = BM25Retriever(DOCS)
    for a, b in zip(loaded.score_texts(["alpha", "omega beta"], 8), rebuilt.score_texts(["alpha", "omega beta"], 8),
                    strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("verify", ["full", "quick"])
def test_document_lengths_past_int64_are_refused_not_wrapped(tmp_path: Path, verify: str) -> None:
    """A ``doc_len`` saved as uint64 with a length of 2**63 or more is refused naming the file,
    the position and the length (before: cast to int64 it wrapped negative, and an index
    without term frequencies to compare it with served it)."""
    BM25Retriever(DOCS).save(tmp_path)
    path = file_of(tmp_path, "doc_len")
    lengths = np.load(path).astype(np.uint64)
    np.save(path, lengths)
    reseal(tmp_path)
    loaded = BM25Retriever.load(tmp_path, verify=verify)  # uint64 itself is fine
    np.testing.assert_array_equal(np.asarray(loaded.doc_len), lengths.astype(np.int64))
    assert np.asarray(loaded.doc_len).dtype == np.int64
    lengths[5] = np.uint64(2**63 + 7)
    np.save(path, lengths)
    reseal(tmp_path)
    with pytest.raises(KolmValueError, match=r"doc_len\.[0-9a-f]{32}\.npy: document length 9223372036854775815 "
                                             r"at position 5 is past int64"):
        BM25Retriever.load(tmp_path, verify=verify)
