"""Frames that differ in what the queries' preparation or the measuring reads must never share
a queries or qrels digest (the key of an experiment's cached runs and measure table), and no
frame may make a digest raise. Each case here once digested alike (or raised)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from kolm_search import BM25Retriever, Experiment
from kolm_search.compose.queries import queries_digest
from kolm_search.evaluation.table_cache import qrels_digest
from kolm_search.io import load_dataset


def objects(values: list[Any]) -> pd.Series:
    return pd.Series(values, dtype=object)


def apart(a: str | None, b: str | None) -> bool:
    """Two digests that never key one cache entry for both frames."""
    return a is None or b is None or a != b


def _forged_categories(next_name: str) -> tuple[tuple[str, str], tuple[str, list[str], str]]:
    """A categorical column of one category then a ``str`` column named ``next_name``, and
    another categorical of two categories (one unused) then another ``str`` column, whose
    lengths and bytes run alike when the number of categories is not digested:
    ``((category, text), (category, categories, text))``."""
    head = f"\x1e{next_name!r}\x1fstr\x1d".encode() + b"strings\x1d"
    tail = b"d1"
    pad = 37 - len(head) - 9
    text = b"a" * pad + head + np.int64(len(tail)).tobytes() + b"\x1d" + tail
    lone = b"\0" * 7 + b"\x1d"  # its length's 8 bytes, then "\x1d" and these, read as a second length (29)
    both = head + np.int64(len(text)).tobytes() + b"\x1d" + b"a" * pad
    first, second = both[:8], both[8:]
    return (lone.decode(), text.decode()), (first.decode(), [first.decode(), second.decode()], tail.decode())


def test_categories_of_another_count_do_not_run_into_the_next_column() -> None:
    (cat_a, doc_a), (cat_b, cats_b, doc_b) = _forged_categories("doc_id")
    a = pd.DataFrame({"relevance": [1], "qid": pd.Categorical([cat_a]), "doc_id": pd.Series([doc_a], dtype="str")})
    b = pd.DataFrame({"relevance": [1], "qid": pd.Categorical([cat_b], categories=cats_b),
                      "doc_id": pd.Series([doc_b], dtype="str")})
    assert a["qid"].tolist() != b["qid"].tolist() and a["doc_id"].tolist() != b["doc_id"].tolist()
    assert apart(qrels_digest(a), qrels_digest(b))
    (cat_a, text_a), (cat_b, cats_b, text_b) = _forged_categories("query")
    qa = pd.DataFrame({"qid": pd.Categorical([cat_a]), "query": pd.Series([text_a], dtype="str")})
    qb = pd.DataFrame({"qid": pd.Categorical([cat_b], categories=cats_b), "query": pd.Series([text_b], dtype="str")})
    assert apart(queries_digest(qa), queries_digest(qb))


@pytest.mark.parametrize(("one", "other"), [
    ([1, 2.5], [1.0, 2.5]),  # Arrow makes doubles of both; the measuring reads "1" and "1.0"
    ([np.True_, 2], [1, 2]),  # Arrow makes integers of both; read as "True" and "1"
    ([np.float32(0.1), 1.0], [0.10000000149011612, 1.0]),  # one double; read as "0.1" and "0.10000000149011612"
], ids=["int-and-float", "numpy-bool-and-int", "float32-and-float"])
def test_object_columns_whose_values_read_as_other_ids_digest_apart(one: list[Any], other: list[Any]) -> None:
    assert [str(v) for v in one] != [str(v) for v in other]  # the ids as the measuring compares them
    base = {"doc_id": ["d1", "d2"], "relevance": [1, 1]}
    assert apart(qrels_digest(pd.DataFrame({"qid": objects(one), **base})),
                 qrels_digest(pd.DataFrame({"qid": objects(other), **base})))
    assert apart(qrels_digest(pd.DataFrame({"qid": ["1", "2"], "doc_id": objects(one), "relevance": [1, 1]})),
                 qrels_digest(pd.DataFrame({"qid": ["1", "2"], "doc_id": objects(other), "relevance": [1, 1]})))
    assert apart(queries_digest(pd.DataFrame({"qid": objects(one), "query": ["a", "b"]})),
                 queries_digest(pd.DataFrame({"qid": objects(other), "query": ["a", "b"]})))


def test_object_columns_of_plain_ids_are_still_digested() -> None:
    frame = pd.DataFrame({"qid": objects([1, 2]), "doc_id": objects(["d1", "d2"]), "relevance": [1, 1]})
    assert qrels_digest(frame) is not None and qrels_digest(frame) == qrels_digest(frame.copy())
    assert queries_digest(pd.DataFrame({"qid": objects([1, np.int64(2)]), "query": objects(["a", "b"])})) is not None


def test_column_names_of_other_types_digest_apart() -> None:
    base = {"qid": ["1"], "doc_id": ["d1"], "relevance": [1]}
    assert apart(qrels_digest(pd.DataFrame({**base, 1: [0]})), qrels_digest(pd.DataFrame({**base, "1": [0]})))


def test_a_string_view_column_is_not_an_error() -> None:
    view = pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([pa.array(["d1", "d2"], pa.string_view())])))
    frame = pd.DataFrame({"qid": ["1", "2"], "doc_id": view, "relevance": [1, 1]})
    qrels_digest(frame)  # a digest or None, never an exception
    queries_digest(pd.DataFrame({"qid": view, "query": view}))


@pytest.fixture(scope="module")
def small():  # type: ignore[no-untyped-def]
    data = load_dataset("cranfield")
    keep = list(data.judged_queries()["qid"].iloc[:12])
    data.queries = data.queries[data.queries["qid"].isin(keep)].reset_index(drop=True)
    data.qrels = data.qrels[data.qrels["qid"].isin(keep)].reset_index(drop=True)
    data.queries["qid"] = data.queries["qid"].astype(np.int64)
    return data


def _qrels_with_qids(data: Any, first_as: Any) -> pd.DataFrame:
    """The qrels with object qids (ints), one extra judgement of a float qid no query has, and
    the first query's qid written as ``first_as(qid)``."""
    first = int(data.queries["qid"].iloc[0])
    qids = [first_as(q) if q == first else q for q in (int(q) for q in data.qrels["qid"])]
    out = pd.DataFrame({"qid": objects([*qids, 0.5]), "doc_id": [*data.qrels["doc_id"].astype(str), "1"],
                        "relevance": [*data.qrels["relevance"], 1]})
    return out


def test_an_experiment_over_qrels_changed_in_a_way_arrow_hides_measures_again(small, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def table(qrels: pd.DataFrame, cache: Path | None) -> pd.DataFrame:
        small.qrels = qrels
        pipes = {"bm25": BM25Retriever(small.corpus) % 20}
        return Experiment(pipes, small, ["ndcg@10"], progress=False, cache_dir=cache, limit=20,
                          drop_self_hits=False).run()

    as_ints, as_floats = _qrels_with_qids(small, int), _qrels_with_qids(small, float)
    expected = table(as_floats, None)
    assert not expected.equals(table(as_ints, None))  # the measuring tells them apart
    table(as_ints, tmp_path)
    pd.testing.assert_frame_equal(table(as_floats, tmp_path), expected)


def test_an_integer_past_64_bits_in_an_object_column_is_not_an_error() -> None:
    big = objects([2**70, 1])
    assert qrels_digest(pd.DataFrame({"qid": big, "doc_id": ["d1", "d2"], "relevance": [1, 1]})) is None
    assert queries_digest(pd.DataFrame({"qid": big, "query": ["a", "b"]})) is not None  # per query, as ints
    assert queries_digest(pd.DataFrame({"qid": objects([2**70, 1]), "query": ["a", "b"]})) \
        != queries_digest(pd.DataFrame({"qid": objects([2**70 + 1, 1]), "query": ["a", "b"]}))
