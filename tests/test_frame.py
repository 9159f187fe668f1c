"""Candidate frame and document table: schema checks, conversions, filters, persistence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search import (
    CandidateFrame,
    DocumentTable,
    FrameValidationError,
    KolmTypeError,
    KolmValueError,
    QueryBatch,
    SearchDocument,
)


def test_from_ptr_select_page_to_run() -> None:
    f = CandidateFrame.from_ptr([0, 3, 3, 5], [4, 1, 2, 0, 4], [3.0, 2.0, 1.0, 9.0, 8.0])
    assert list(f.query) == [0, 0, 0, 2, 2] and list(f.rank) == [0, 1, 2, 0, 1]
    assert list(f.ptr) == [0, 3, 3, 5]
    run = f.to_run(["a", "b", "c", "d", "e"], ["q0", "q1", "q2"])
    assert list(run.itertuples(index=False, name=None))[:2] == [("q0", "e", 0, 3.0), ("q0", "b", 1, 2.0)]
    sel = f.select([2, 0])
    assert list(sel.doc) == [0, 4, 4, 1, 2] and sel.n_queries == 2
    assert list(f.page(1, 1).doc) == [1, 4]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"query": np.array([1, 0], np.int32)}, "sorted by query"),
        ({"query": np.array([0, 5], np.int32)}, "lie in"),
        ({"rank": np.array([0, -1], np.int32)}, "rank"),
        ({"doc": np.array([-1, 0])}, "doc"),
        ({"score": np.zeros(3)}, "shape"),
        ({"query": np.array([0.0, 0.5])}, "'query' has dtype float64; it holds integer codes"),
        ({"doc": np.array([1.0, 2.0])}, "'doc' has dtype float64"),
        ({"rank": np.array([0.0, 1.0])}, "'rank' has dtype float64"),
        ({"list_id": np.array([0.0, 0.0])}, "'list_id' has dtype float64"),
        ({"score": np.array(["1", "0.5"], dtype=object)}, "'score' has dtype object; it holds real numbers"),
        ({"score": np.array([1 + 0j, 0j])}, "'score' has dtype complex128"),
        ({"features": np.array([["a"], ["b"]])}, "'features' has dtype <U1"),
        ({"n_queries": -1}, "n_queries is -1"),
        ({"n_queries": 2.0}, "n_queries is 2.0"),
        ({"n_queries": True}, "n_queries is True"),
    ],
)
def test_validation_errors(kwargs: dict[str, object], match: str) -> None:
    base = {"query": np.array([0, 0], np.int32), "doc": np.array([1, 2]), "score": np.array([1.0, 0.5]),
            "rank": np.array([0, 1], np.int32), "n_queries": 2}
    with pytest.raises(FrameValidationError, match=match):
        CandidateFrame(**{**base, **kwargs})  # type: ignore[arg-type]


def test_concat_sorts_by_query_list_rank() -> None:
    a = CandidateFrame.from_ptr([0, 1, 2], [5, 6], [1.0, 1.0])
    b = CandidateFrame.from_ptr([0, 2, 2], [7, 8], [1.0, 1.0])
    c = CandidateFrame.concat([a, b])
    assert list(c.doc) == [5, 7, 8, 6] and list(c.list_id) == [0, 1, 1, 0]
    with pytest.raises(FrameValidationError):
        CandidateFrame.concat([a, CandidateFrame.empty(3)])


def test_query_batch_validation() -> None:
    with pytest.raises(FrameValidationError, match="owner"):
        QueryBatch(texts=["a", "b"], owner=[1, 0], n_queries=2, limit=1, filters=[{}, {}])
    with pytest.raises(FrameValidationError, match="filters"):
        QueryBatch(texts=["a"], owner=[0], n_queries=1, limit=1, filters=[])


def test_a_batch_is_single_only_when_each_query_has_one_text() -> None:
    """As many texts as queries is not enough: owners 0, 0, 2 give query 0 two texts and query 1
    none (an expansion's lists would be read as other queries')."""
    def batch(owner: list[int], n: int) -> QueryBatch:
        return QueryBatch(texts=["t"] * len(owner), owner=owner, n_queries=n, limit=1, filters=[{}] * n)

    assert batch([0, 1, 2], 3).single and batch([], 0).single
    assert not batch([0, 0, 2], 3).single and not batch([0, 0], 2).single and not batch([1], 2).single
    assert not batch([0, 0, 1], 2).single and replace(batch([0, 1, 2], 3), limit=5).single


def test_document_table_codes_filters_and_round_trip(tmp_path: Path) -> None:
    docs = [SearchDocument(id="a", content="x", title="T", tags=["k1", "k2"], metadata={"year": 2001, "lang": "en"}),
            SearchDocument(id="b", content="y", source="web", metadata={"year": 1999}),
            SearchDocument(id="c", content="z")]
    t = DocumentTable.from_documents(docs)
    assert list(t.codes(["c", "a"])) == [2, 0]
    assert list(t.codes(["zz"], missing="ignore")) == [-1]
    with pytest.raises(KolmValueError, match="unknown document id"):
        t.codes(["zz"])
    assert list(t.filter_mask({"tags": "k2"})) == [True, False, False]
    assert list(t.filter_mask({"year": [1999, 2001], "source": "web"})) == [False, True, False]
    assert t.filter_mask({}) is None
    with pytest.raises(KolmValueError, match="unknown filter field 'colour'"):
        t.filter_mask({"colour": "red"})
    t.save(tmp_path / "d.parquet")
    back = DocumentTable.load(tmp_path / "d.parquet")
    assert back.documents([0, 1, 2]) == t.documents([0, 1, 2]) == [SearchDocument(**d.to_dict()) for d in docs]
    assert t.texts() == ["T x", "y", "z"]


@pytest.mark.parametrize(
    "frame, match",
    [
        (pd.DataFrame({"id": ["a", "a"], "content": ["x", "y"]}), "duplicate document id 'a'"),
        (pd.DataFrame({"id": ["a", 3], "content": ["x", "y"]}), "ids must be strings"),
        (pd.DataFrame({"id": ["a"], "content": [None]}), "content must be str"),
        (pd.DataFrame({"content": ["x"]}), "needs columns"),
    ],
)
def test_document_table_errors(frame: pd.DataFrame, match: str) -> None:
    with pytest.raises(KolmValueError, match=match):
        DocumentTable.from_frame(frame)


def test_extra_columns_become_metadata() -> None:
    t = DocumentTable.from_frame(pd.DataFrame({"id": ["1", "2"], "content": ["a", "b"], "year": [2000, None]}))
    assert t.documents([0, 1])[0].metadata == {"year": 2000.0} and t.documents([1])[0].metadata is None
    assert list(t.filter_mask({"year": 2000})) == [True, False]


@pytest.mark.parametrize("dtype", [object, "str"])
def test_document_table_keeps_its_own_columns_not_the_callers(dtype: object) -> None:
    # a write through a column's .array (which pandas' copy on write does not see) into the frame the
    # table was made from must not change the table's documents, ids or digest
    frame = pd.DataFrame({"id": ["a", "b", "c"], "content": ["apple pie", "banana split", "cherry tart"],
                          "title": ["A", "B", "C"]}, dtype=dtype)  # type: ignore[call-overload]
    table = DocumentTable(frame)
    digest = table.digest()
    frame["content"].array[0] = "changed"
    frame["title"].array[1] = "changed"
    frame["id"].array[2] = "z"
    assert table.frame["content"].tolist() == ["apple pie", "banana split", "cherry tart"]
    assert table.frame["title"].tolist() == ["A", "B", "C"]
    assert list(table.ids) == ["a", "b", "c"] and list(table.ids_of([2])) == ["c"]
    assert list(table.codes(["c"])) == [2]
    assert DocumentTable(table.frame.copy()).digest() == digest


def test_a_write_into_a_tables_frame_or_ids_leaves_the_table_as_it_was() -> None:
    # the frame a table gives is a copy on write of its own (a loc write changes the caller's alone),
    # and its ids are read-only: the documents, codes and digest stay the ones the table was made of
    table = DocumentTable.from_frame(pd.DataFrame({"id": ["a", "b"], "content": ["apple pie", "banana"]}))
    digest = table.digest()
    frame = table.frame
    frame.loc[0, "content"] = "changed"
    frame.loc[1, "id"] = "z"
    assert frame["content"].tolist() == ["changed", "banana"]
    assert table.frame["content"].tolist() == ["apple pie", "banana"] and table.documents([0])[0].content == "apple pie"
    with pytest.raises(ValueError, match="read-only"):
        table.ids[1] = "z"
    assert list(table.ids) == ["a", "b"] and list(table.codes(["b"])) == [1]
    assert DocumentTable(table.frame).digest() == digest


def test_coerce_takes_every_documented_form_and_names_bad_ones() -> None:
    """One door for documents: table, DataFrame, SearchDocuments, dicts (and iterators of them)."""
    docs = [SearchDocument(id="1", content="wing flow", title="T"), SearchDocument(id="2", content="heat")]
    table = DocumentTable.from_documents(docs)
    assert DocumentTable.coerce(table) is table
    forms = [docs, iter(docs), [d.to_dict() for d in docs], table.frame.drop(columns=["metadata"])]
    for form in forms:
        t = DocumentTable.coerce(form)
        assert t.ids.tolist() == ["1", "2"] and t.texts() == ["T wing flow", "heat"]
    for bad in ("text", b"x", {"id": "1", "content": "x"}, docs[0], 3, None):
        with pytest.raises(KolmTypeError, match="documents must be a list of documents"):
            DocumentTable.coerce(bad)
    with pytest.raises(KolmTypeError, match="document 1: a SearchDocument must be a mapping, got int"):
        DocumentTable.coerce([docs[0], 2])
    with pytest.raises(KolmValueError, match="document 0: SearchDocument needs string 'id'"):
        DocumentTable.coerce([{"id": 1, "content": "x"}])
    with pytest.raises(KolmValueError, match="duplicate document id '1'"):
        DocumentTable.coerce([docs[0], docs[0]])


@pytest.mark.parametrize("fields", [("title", "content"), ("content",), ("title",), ("source", "title", "content")])
def test_texts_join_present_fields_with_one_space(fields: tuple[str, ...]) -> None:
    frame = pd.DataFrame({"id": list("abcde"), "content": ["x y", "", "z", "w", ""],
                          "title": ["T", None, "", "U", float("nan")], "source": [None, "s", None, "", None]})
    t = DocumentTable.from_frame(frame)
    oracle = [" ".join(str(v) for v in row if isinstance(v, str) and v) for row in frame[list(fields)].itertuples(index=False)]
    assert t.texts(fields) == oracle


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64, np.int16])
@pytest.mark.parametrize("past_int32", [False, True])
def test_reordered_keeps_the_frames_queries_and_ranks_of_any_integer_dtype(dtype: type, past_int32: bool) -> None:
    """``CandidateFrame.reordered`` gives a frame of this frame's queries and ranks: their
    values kept whatever the columns' dtype (a rank past int32, which the schema check lets
    through, is not wrapped, e.g. 2**32 into 0), and its ``ranked_counts`` this frame's and
    those of a frame built afresh from its columns."""
    if past_int32 and np.iinfo(dtype).max <= np.iinfo(np.int32).max:
        pytest.skip("the dtype holds no rank past int32")
    rank = np.array([0, 1, 2**32 if past_int32 else 2, 0], np.int64)
    frame = CandidateFrame(query=np.array([0, 0, 0, 1], dtype), doc=np.array([4, 5, 6, 7]),
                           score=np.array([3.0, 2.0, 1.0, 0.5]), rank=rank.astype(dtype), n_queries=2)
    for warm in (False, True):
        warmed = frame.ranked_counts if warm else None  # cached on the frame before the new one is made
        out = frame.reordered(frame.doc[[1, 0, 2, 3]], frame.score[[1, 0, 2, 3]])
        assert out.query is frame.query and out.rank is frame.rank
        if warmed is not None:
            np.testing.assert_array_equal(out.ranked_counts, warmed)
        np.testing.assert_array_equal(out.query.astype(np.int64), [0, 0, 0, 1])
        np.testing.assert_array_equal(out.rank.astype(np.int64), rank)
        fresh = CandidateFrame(out.query, out.doc, out.score, out.rank, out.n_queries).ranked_counts
        if fresh is None:
            assert out.ranked_counts is None
        else:
            np.testing.assert_array_equal(out.ranked_counts, fresh)


def test_reordered_refuses_documents_and_scores_it_would_have_to_convert() -> None:
    """``CandidateFrame.reordered`` takes integer codes and real scores as they are (int64 and
    float64 for the kernels); float codes (truncated before) and text scores (parsed before)
    raise ``FrameValidationError`` naming the column."""
    frame = CandidateFrame.from_ptr([0, 2], [3, 4], [0.5, 0.25])
    out = frame.reordered(np.array([4, 3], np.uint32), np.array([0.25, 0.5], np.float32))
    assert out.doc.dtype == np.int64 and out.score.dtype == np.float64 and list(out.doc) == [4, 3]
    with pytest.raises(FrameValidationError, match="'doc' has dtype float64"):
        frame.reordered(np.array([4.5, 3.0]), np.array([0.25, 0.5]))
    with pytest.raises(FrameValidationError, match="'score' has dtype <U4"):
        frame.reordered(np.array([4, 3]), np.array(["0.25", "0.5"]))


def test_same_documents_is_same_ids_in_order_whatever_the_texts() -> None:
    """Oracle: the ids compared as Python lists. Texts do not count; order, count and each byte
    do (ids a+bb and ab+b are as many bytes); ids Arrow cannot encode (a lone surrogate) too."""
    from kolm_search.engine.same_documents import same_documents

    def table(ids: list[str], text: str = "c") -> DocumentTable:
        frame = pd.DataFrame({"id": np.array(ids, object), "content": np.array([text] * len(ids), object)}, dtype=object)
        return DocumentTable.coerce(frame)

    cases = [["a", "bb"], ["ab", "b"], ["bb", "a"], ["a"], [], ["a", "b\ud800"], ["a", "b\udc00"]]
    for left in cases:
        for right in cases:
            assert same_documents(table(left), table(right, "other text")) == (left == right), (left, right)
    one = table(["x"])
    assert same_documents(one, one)
