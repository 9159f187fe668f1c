"""Filter operators: compiled masks against a plain-Python evaluation per document, every
operator, clear errors, and filtered top-k against brute force (bm25, dense; single and batch)."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kolm_search import SearchDocument, SearchError, presets
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.filters import FilterError, parse_filter
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from tests.conftest import synthetic_corpus
from tests.fakes import BatchHashEmbedder

# -- the oracle: the documented semantics, one document at a time, in plain Python ----------
FIELDS = ("id", "content", "title", "source", "tags")
OPS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$not")
SEQ = (list, tuple, set, frozenset, np.ndarray)


class Invalid(Exception):
    """The oracle's verdict: this filter must be rejected."""


def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def value_of(doc: SearchDocument, name: str) -> Any:
    if name in FIELDS:
        return getattr(doc, name)
    key = name[len("metadata."):] if name.startswith("metadata.") else name
    return (doc.metadata or {}).get(key)


def elements(v: Any) -> list[Any]:
    if missing(v):
        return []
    if isinstance(v, (list, tuple)):
        return [x for x in v if not missing(x)]
    return [v]


def kind(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "bool"
    if isinstance(x, (int, float, np.integer, np.floating)):
        return "number"
    if isinstance(x, str):
        return "string"
    return "other"


def same(x: Any, y: Any) -> bool:
    if kind(x) != kind(y):
        return False
    if kind(x) == "other":
        return json.dumps(x, sort_keys=True, default=str) == json.dumps(y, sort_keys=True, default=str)
    return bool(x == y)


def scalar_operand(v: Any) -> Any:
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        raise Invalid("nan")
    if v is not None and (isinstance(v, SEQ) or not isinstance(v, (str, int, float, dict, np.integer, np.floating))):
        raise Invalid("not a scalar")
    return v


def seq_operand(v: Any) -> list[Any]:
    if not isinstance(v, SEQ) or (isinstance(v, np.ndarray) and v.ndim != 1):
        raise Invalid("not a sequence")
    return [scalar_operand(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]


def check_field(name: Any, docs: list[SearchDocument]) -> None:
    if not isinstance(name, str):
        raise Invalid("field name")
    key = name[len("metadata."):] if name.startswith("metadata.") else name
    if name not in FIELDS and not any(key in (d.metadata or {}) for d in docs):
        raise Invalid("unknown field")


def op_matches(name: str, op: str, arg: Any, doc: SearchDocument, docs: list[SearchDocument]) -> bool:
    value = value_of(doc, name)
    els = elements(value)
    if op in ("$eq", "$ne"):
        a = scalar_operand(arg)
        hit = missing(value) if a is None else any(same(x, a) for x in els)
        return hit if op == "$eq" else not hit
    if op in ("$in", "$nin"):
        values = seq_operand(arg)
        hit = any(missing(value) if a is None else any(same(x, a) for x in els) for a in values)
        return hit if op == "$in" else not hit
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            arg = arg.item()
        if kind(arg) not in ("number", "string") or (isinstance(arg, float) and math.isnan(arg)):
            raise Invalid("range operand")
        for d in docs:  # every element of the field must be comparable with the operand
            if any(kind(x) != kind(arg) for x in elements(value_of(d, name))):
                raise Invalid("type mismatch")
        test = {"$gt": lambda x: x > arg, "$gte": lambda x: x >= arg, "$lt": lambda x: x < arg,
                "$lte": lambda x: x <= arg}[op]
        # the validation probe (not among ``docs``) may hold another kind: it is only validated
        return any(test(x) for x in els if kind(x) == kind(arg))
    if op == "$exists":
        if not isinstance(arg, (bool, np.bool_)):
            raise Invalid("exists operand")
        return (not missing(value)) == bool(arg)
    if op == "$not":
        if not isinstance(arg, dict) or not arg or not all(isinstance(k, str) and k.startswith("$") for k in arg):
            raise Invalid("$not operand")
        return not condition(name, arg, doc, docs)
    raise Invalid("unknown operator")


def condition(name: str, cond: Any, doc: SearchDocument, docs: list[SearchDocument]) -> bool:
    check_field(name, docs)
    if isinstance(cond, dict) and any(isinstance(k, str) and k.startswith("$") for k in cond):
        if not all(isinstance(k, str) and k.startswith("$") for k in cond):
            raise Invalid("mixed")
        results = [op_matches(name, op, arg, doc, docs) for op, arg in cond.items()]  # validate them all
        return all(results)
    if isinstance(cond, dict) and not cond:
        raise Invalid("empty condition")
    if isinstance(cond, SEQ) and not (isinstance(cond, np.ndarray) and cond.ndim == 0):
        return op_matches(name, "$in", cond, doc, docs)
    return op_matches(name, "$eq", cond, doc, docs)


def matches(f: Any, doc: SearchDocument, docs: list[SearchDocument]) -> bool:
    if not isinstance(f, dict):
        raise Invalid("not a dict")
    results = []
    for key, cond in f.items():
        if key in ("$and", "$or", "$nor"):
            if not isinstance(cond, (list, tuple)) or not cond:
                raise Invalid("logical operand")
            parts = [matches(g, doc, docs) for g in cond]
            results.append(all(parts) if key == "$and" else (any(parts) if key == "$or" else not any(parts)))
        elif key == "$not":
            results.append(not matches(cond, doc, docs))
        elif isinstance(key, str) and key.startswith("$"):
            raise Invalid("unknown top-level operator")
        else:
            results.append(condition(key, cond, doc, docs))
    return all(results)


def oracle(f: dict[str, Any], docs: list[SearchDocument]) -> np.ndarray | None:
    """The mask by the oracle, or None when the filter must be rejected."""
    try:
        if not docs:
            matches(f, SearchDocument(id="probe", content=""), docs)  # validation only
            return np.zeros(0, bool)
        return np.array([matches(f, d, docs) for d in docs], dtype=bool)
    except Invalid:
        return None


# -- random tables and filters ----------------------------------------------------------------
WORDS = ["en", "fr", "de", "x", "", "é", "Zz"]
NUMBERS = st.one_of(st.integers(-3, 3), st.sampled_from([2**60, 2**60 + 1, float(2**60), 1.5, -0.0, math.inf, 1e300]))
SCALARS = st.one_of(NUMBERS, st.sampled_from(WORDS), st.booleans())
META_VALUES = {
    "year": st.one_of(st.integers(1990, 1996), st.sampled_from([2**60 + 1, 1993.5]), st.none(), st.just(math.nan)),
    "lang": st.one_of(st.sampled_from(WORDS), st.none()),
    "flag": st.booleans(),
    "multi": st.lists(st.one_of(st.integers(0, 4), st.sampled_from(["a", "b"]), st.none()), max_size=3),
    "mixed": st.one_of(st.integers(0, 3), st.sampled_from(["0", "1"]), st.booleans()),
    "nested": st.sampled_from([{"a": 1}, {"a": 2}, {"b": [1, 2]}]),
}


@st.composite
def documents(draw: st.DrawFn) -> list[SearchDocument]:
    n = draw(st.integers(0, 14) | st.integers(3, 14))
    docs = []
    for i in range(n):
        keys = draw(st.lists(st.sampled_from(sorted(META_VALUES)), unique=True, min_size=1, max_size=5))
        meta = {k: draw(META_VALUES[k]) for k in keys}
        docs.append(SearchDocument(
            id=f"d{i}", content=draw(st.sampled_from(WORDS)), title=draw(st.one_of(st.none(), st.sampled_from(WORDS))),
            source=draw(st.one_of(st.none(), st.sampled_from(["web", "book"]))),
            tags=draw(st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))),
            metadata=meta or None))
    return docs


# operands mostly from the field's own values (so that filters select), sometimes anything
POOLS: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from([f"d{i}" for i in range(14)]), "content": st.sampled_from(WORDS),
    "title": st.sampled_from(WORDS), "source": st.sampled_from(["web", "book"]), "tags": st.sampled_from(["a", "b", "c"]),
    "year": st.one_of(st.integers(1989, 1997), st.sampled_from([2**60 + 1, 2**60, 1993.5])),
    "lang": st.sampled_from(WORDS), "metadata.lang": st.sampled_from(WORDS), "flag": st.booleans(),
    "multi": st.one_of(st.integers(0, 4), st.sampled_from(["a", "b"])), "mixed": st.one_of(st.integers(0, 3), st.sampled_from(["0", "1"]), st.booleans()),
    "nested": st.sampled_from([{"a": 1}, {"a": 2}, {"b": [1, 2]}]),
}
ODD = st.one_of(SCALARS, st.none(), st.just(math.nan), st.sampled_from([{"a": 1}, [1], {"$gt": 1}, b"x", np.array(3)]))


def seq_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists, tuples, sets and 1-D numpy arrays of values."""
    lists = st.lists(values, max_size=3)
    hashable = st.lists(values.filter(lambda v: isinstance(v, (str, int, float)) or v is None), max_size=3)
    return st.one_of(lists, lists.map(tuple), hashable.map(set),
                     hashable.map(lambda v: np.array(v, dtype=object)),
                     st.lists(st.integers(0, 4), max_size=3).map(lambda v: np.array(v, dtype=np.int64)))


def conditions(field: str) -> st.SearchStrategy[Any]:
    own = POOLS.get(field, st.sampled_from(WORDS))
    value = st.one_of(own, own, own, own, own, own, ODD)
    args: dict[str, st.SearchStrategy[Any]] = {
        "$eq": value, "$ne": value, "$in": st.one_of(seq_of(value), seq_of(value), ODD), "$nin": seq_of(value),
        "$gt": st.one_of(own, own, own, ODD), "$gte": own, "$lt": own, "$lte": st.one_of(own, ODD),
        "$exists": st.one_of(st.booleans(), st.booleans(), st.sampled_from([1, "yes"])),
    }
    ops = st.one_of([st.tuples(st.just(op), arg) for op, arg in args.items()])
    op_dict = st.lists(ops, min_size=1, max_size=2).map(dict)
    odd = st.sampled_from([{"$regex": "x"}, {}, {"$eq": 1, "a": 1}])
    return st.one_of(value, seq_of(value), op_dict, op_dict, op_dict, op_dict.map(lambda d: {"$not": d}), odd)


def filters() -> st.SearchStrategy[dict[str, Any]]:
    """Leaves (one or two fields) under random $and / $or / $nor / $not, a few levels deep."""
    field = st.one_of([st.tuples(st.just(f), conditions(f)) for f in [*sorted(POOLS), "colour"]])
    leaf = st.lists(field, min_size=1, max_size=2).map(dict)
    tree: st.SearchStrategy[dict[str, Any]] = st.deferred(lambda: st.one_of(
        leaf, leaf, leaf,
        st.tuples(st.sampled_from(["$and", "$or", "$nor"]), st.lists(tree, min_size=1, max_size=3)).map(lambda t: {t[0]: t[1]}),
        tree.map(lambda f: {"$not": f}),
        st.tuples(tree, leaf).map(lambda t: {**t[1], "$and": [t[0]]})))
    return tree


FILTERS = filters()


@pytest.mark.slow  # 250 filter trees: ~12 s
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=documents(), f=FILTERS)
def test_compiled_mask_equals_the_per_document_evaluation(docs: list[SearchDocument], f: dict[str, Any]) -> None:
    table = DocumentTable.from_documents(docs)
    want = oracle(f, docs)
    if want is None:
        with pytest.raises((KolmValueError, KolmTypeError)):
            table.filter_mask(f)
        return
    got = table.filter_mask(f)
    assert got is not None and got.dtype == bool
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(docs=documents(), fs=st.lists(FILTERS, min_size=1, max_size=3))
@example(docs=[], fs=[{"content": {"$gt": 0}}])  # an empty corpus: the oracle's probe compared text with 0
def test_masks_of_a_batch_are_each_filters_mask(docs: list[SearchDocument], fs: list[dict[str, Any]]) -> None:
    """One compile per distinct filter in a batch; each query still gets its own filter's mask."""
    from kolm_search.retrievers._batching import filter_selections

    table = DocumentTable.from_documents(docs)
    wants = [oracle(f, docs) for f in [*fs, *fs]]
    if any(w is None for w in wants):
        with pytest.raises(FilterError) as info:
            filter_selections(table, [*fs, *fs])
        assert wants[info.value.row] is None and info.value.stage == "retriever"
        return
    sel = filter_selections(table, [*fs, *fs])
    assert len(sel.mask_of) <= len(fs)
    for i, want in enumerate(wants):
        np.testing.assert_array_equal(sel.mask(i, len(docs)), want)


# -- every operator, by example ---------------------------------------------------------------
DOCS = [
    SearchDocument(id="a", content="x", title="T", tags=["k1", "k2"], metadata={"year": 2001, "lang": "en", "n": [1, 5]}),
    SearchDocument(id="b", content="y", source="web", metadata={"year": 1999.0, "lang": "fr"}),
    SearchDocument(id="c", content="z", tags=[], metadata={"lang": None, "n": 3}),
    SearchDocument(id="d", content="w", metadata={"year": 2010, "title": "meta title"}),
]


@pytest.mark.parametrize("f, want", [
    ({"lang": "en"}, "a"), ({"lang": {"$eq": "en"}}, "a"), ({"lang": {"$ne": "en"}}, "bcd"),
    ({"lang": ["fr", "de"]}, "b"), ({"lang": np.array(["fr", "de"])}, "b"), ({"lang": ("en",)}, "a"),
    ({"lang": {"fr"}}, "b"), ({"lang": {"$in": np.array(["en", "fr"], dtype=object)}}, "ab"),
    ({"lang": {"$nin": ["en"]}}, "bcd"), ({"year": {"$gt": 2000}}, "ad"), ({"year": {"$gte": 2001}}, "ad"),
    ({"year": {"$lt": 2001}}, "b"), ({"year": {"$lte": 2001.0}}, "ab"), ({"year": {"$gt": 1999, "$lt": 2010}}, "a"),
    ({"year": 1999}, "b"), ({"year": np.int64(2010)}, "d"), ({"lang": {"$exists": True}}, "ab"),
    ({"lang": {"$exists": False}}, "cd"), ({"lang": None}, "cd"), ({"lang": {"$ne": None}}, "ab"),
    ({"tags": "k2"}, "a"), ({"tags": {"$ne": "k1"}}, "bcd"), ({"tags": {"$exists": True}}, "ac"),
    ({"n": {"$gt": 4}}, "a"), ({"n": {"$lt": 2}}, "a"), ({"n": 3}, "c"), ({"source": {"$gte": "w"}}, "b"),
    ({"year": {"$not": {"$gt": 2000}}}, "bc"), ({"$not": {"year": {"$gt": 2000}}}, "bc"),
    ({"$or": [{"lang": "fr"}, {"year": {"$gte": 2010}}]}, "bd"), ({"$nor": [{"lang": "fr"}, {"tags": "k1"}]}, "cd"),
    ({"$and": [{"lang": {"$ne": "en"}}, {"year": {"$gte": 1990}}]}, "bd"),
    ({"lang": {"$ne": "en"}, "year": {"$gte": 2000}, "$or": [{"id": "d"}, {"source": "web"}]}, "d"),
    ({"title": "T"}, "a"), ({"metadata.title": "meta title"}, "d"), ({"id": {"$in": ["a", "c", "zz"]}}, "ac"),
    ({"lang": {"$in": []}}, ""), ({"lang": {"$nin": []}}, "abcd"),
])
def test_every_operator(f: dict[str, Any], want: str) -> None:
    mask = DocumentTable.from_documents(DOCS).filter_mask(f)
    assert mask is not None
    assert "".join(d.id for d, m in zip(DOCS, mask, strict=True) if m) == want
    assert oracle(f, DOCS) is not None and list(oracle(f, DOCS)) == list(mask)  # type: ignore[arg-type]


@pytest.mark.parametrize("f, error, match", [
    ({"lang": {"$regex": "e"}}, KolmValueError, r"field 'lang', operator '\$regex': unknown operator"),
    ({"$xor": [{"lang": "en"}]}, KolmValueError, r"unknown filter operator '\$xor'"),
    ({"lang": {"$in": "en"}}, KolmTypeError, r"field 'lang', operator '\$in': expected a list"),
    ({"year": {"$gt": {"a": 1}}}, KolmTypeError, r"field 'year', operator '\$gt': expected a number or a string"),
    ({"year": {"$gt": True}}, KolmTypeError, r"operator '\$gt'"),
    ({"year": {"$gt": "2000"}}, KolmTypeError, r"field 'year', operator '\$gt': cannot compare number values with the string '2000'; document 'a'"),
    ({"tags": {"$lt": 3}}, KolmTypeError, r"field 'tags', operator '\$lt': cannot compare string"),
    ({"lang": {"$exists": 1}}, KolmTypeError, r"operator '\$exists': expected true or false"),
    ({"lang": {"$eq": ["en"]}}, KolmTypeError, r"operator '\$eq': expected a single value"),
    ({"lang": {"$eq": math.nan}}, KolmValueError, r"NaN"),
    ({"year": {"$lt": math.nan}}, KolmValueError, r"NaN"),
    ({"lang": {"$ne": "en", "x": 1}}, KolmValueError, r"'lang' mixes operators"),
    ({"lang": {}}, KolmValueError, r"'lang' has an empty condition"),
    ({"$or": []}, KolmTypeError, r"'\$or' takes a non-empty list"),
    ({"$and": {"lang": "en"}}, KolmTypeError, r"'\$and' takes a non-empty list"),
    ({"lang": {"$not": "en"}}, KolmTypeError, r"'\$not': expected a dict of operators"),
    ({"colour": {"$exists": False}}, KolmValueError, r"unknown filter field 'colour'"),
    ({3: "x"}, KolmTypeError, r"field names must be strings"),
    ({"lang": {"$in": np.zeros((2, 2))}}, KolmValueError, r"1-D array"),
])
def test_errors_name_field_and_operator(f: dict[Any, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        DocumentTable.from_documents(DOCS).filter_mask(f)
    assert oracle(f, DOCS) is None


def test_deep_nesting_is_a_clear_error_and_any_collection_means_membership() -> None:
    table = DocumentTable.from_documents(DOCS)
    deep: dict[str, Any] = {"lang": "en"}
    for _ in range(5000):
        deep = {"$not": deep}
    with pytest.raises(KolmValueError, match="nested deeper than 64"):
        table.filter_mask(deep)
    field_deep: dict[str, Any] = {"$gt": 1}
    for _ in range(5000):
        field_deep = {"$not": field_deep}
    with pytest.raises(KolmValueError, match="'year' is nested deeper"):
        table.filter_mask({"year": field_deep})
    ok: dict[str, Any] = {"lang": "en"}
    for _ in range(30):
        ok = {"$not": {"$not": ok}}
    assert list(table.filter_mask(ok)) == [True, False, False, False]  # type: ignore[arg-type]
    for values in ({"en": 1}.keys(), pd.Series(["en"]), pd.Index(["en", "xx"])):
        assert list(table.filter_mask({"lang": values})) == [True, False, False, False]  # type: ignore[arg-type]
    assert list(table.filter_mask({"year": range(1999, 2002)})) == [True, True, False, False]  # type: ignore[arg-type]


def test_parse_is_table_free_and_hashable() -> None:
    a = parse_filter({"lang": {"$in": ["en", "fr"]}, "year": {"$gte": 2000}})
    b = parse_filter({"lang": {"$in": np.array(["fr", "en"])}, "year": {"$gte": 2000.0}})
    assert a == b and hash(a) == hash(b)  # one compiled mask serves both in a batch
    assert parse_filter({}) == ("all",)


# -- end to end: filtered top-k equals brute force over the matching documents -----------------
TEXTS = synthetic_corpus(300, 40, seed=11)
CORPUS = [SearchDocument(id=f"doc-{i}", content=t, tags=["even" if i % 2 == 0 else "odd"],
                         metadata={"bucket": i % 5, "year": 1990 + i % 30, **({"lang": "en"} if i % 3 else {})})
          for i, t in enumerate(TEXTS)]
E2E_FILTERS = [{"year": {"$gte": 2000}, "tags": {"$ne": "odd"}}, {"$or": [{"bucket": {"$in": np.array([1, 2])}}, {"lang": {"$exists": False}}]},
               {"$not": {"year": {"$lt": 2015}}}, {"bucket": {"$nin": [0, 1, 2, 3, 4]}}]
E2E_QUERIES = ["w1 w4", "w10 w2 w33", "w5", "w0 w0 w7", "w12 w13 w14 w15"]


def brute_bm25(ret: BM25Retriever, query: str, mask: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Every matching document holding a query term, best first (ties by document order)."""
    docs, scores, counts = ret.score_texts([query], len(ret.table))  # the full ranking, no filter
    docs, scores = docs[0, :counts[0]], scores[0, :counts[0]]
    keep = mask[docs]
    return list(ret.table.ids[docs[keep]]), scores[keep]


def brute_dense(ret: DenseRetriever, emb: np.ndarray, mask: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Every matching document by cosine similarity in float64, best first."""
    q = emb / np.linalg.norm(emb)
    scores = ret.embeddings.astype(np.float64) @ q.astype(np.float64)
    codes = np.flatnonzero(mask)
    order = codes[np.lexsort((codes, -scores[codes]))]
    return list(ret.table.ids[order]), scores[order]


def assert_ranking(ids: list[str], scores: np.ndarray, brute_ids: list[str], brute_scores: np.ndarray, k: int) -> None:
    """The first ``k`` of the brute-force ranking: same scores (1e-5) and ids, except that two
    documents whose scores tie within 1e-5 (float32 rounding) may trade places."""
    assert len(ids) == min(k, len(brute_ids))
    np.testing.assert_allclose(scores, brute_scores[:len(ids)], rtol=1e-5, atol=1e-6)
    score_of = dict(zip(brute_ids, brute_scores, strict=True))
    for i, (got, want) in enumerate(zip(ids, brute_ids, strict=False)):
        assert got == want or (got in score_of and abs(score_of[got] - score_of[want]) <= 1e-5), (i, got, want)


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_filtered_top_k_equals_brute_force_single_and_batch(kind: str) -> None:
    emb = BatchHashEmbedder()
    client = presets.bm25(CORPUS) if kind == "bm25" else presets.dense(CORPUS, emb)
    ret = client.modules.retriever
    k = 7
    requests = [{"query": q, "limit": k, "filters": f} for q in E2E_QUERIES for f in E2E_FILTERS]
    batch = client.search_batch(requests)
    oracle_masks = [oracle(f, CORPUS) for f in E2E_FILTERS]
    for qid, req in enumerate(requests):
        mask = oracle_masks[qid % len(E2E_FILTERS)]
        assert mask is not None
        if kind == "bm25":
            want_ids, want_scores = brute_bm25(ret, req["query"], mask)
        else:
            want_ids, want_scores = brute_dense(ret, np.asarray(emb.vector(req["query"])), mask)
        single = client.search_sync(req)
        assert_ranking([d.id for d in single.results], np.array([d.score for d in single.results]), want_ids, want_scores, k)
        sub = batch.run[batch.run.qid == qid]
        assert_ranking(list(sub.doc_id), sub.score.to_numpy(), want_ids, want_scores, k)
        assert all(mask[int(i[4:])] for i in sub.doc_id)


def test_filters_apply_before_top_k_in_the_kernels() -> None:
    """A filter matching only documents ranked far below k still fills the page."""
    ret = BM25Retriever(CORPUS)
    full = ret.score_texts(["w1"], len(CORPUS))
    tail = ret.table.ids[full[0][0, full[2][0] - 3:full[2][0]]]  # the three worst-ranked holders of w1
    frame = ret.retrieve_batch(QueryBatch(texts=["w1"], owner=[0], n_queries=1, limit=3,
                                          filters=[{"id": {"$in": list(tail)}}], mode="fulltext"))
    assert sorted(ret.table.ids[frame.doc]) == sorted(tail)


@pytest.mark.parametrize("kind, stage", [("bm25", "retriever"), ("dense", "retriever"), ("hybrid", "composite-retriever")])
def test_bad_filter_is_the_same_error_in_single_and_batch(kind: str, stage: str) -> None:
    emb = BatchHashEmbedder()
    client = {"bm25": lambda: presets.bm25(CORPUS), "dense": lambda: presets.dense(CORPUS, emb),
              "hybrid": lambda: presets.hybrid(CORPUS, emb)}[kind]()
    bad = {"year": {"$gt": "2000"}}
    for mode in ("fulltext", "vector", "hybrid") if kind != "bm25" else ("fulltext", "hybrid"):
        with pytest.raises(SearchError, match=r"field 'year', operator '\$gt'") as single:
            client.search_sync({"query": "w1", "filters": bad, "mode": mode})
        assert single.value.stage == stage
        with pytest.raises(SearchError, match=r"query 2 \(position in the batch\).*field 'year', operator '\$gt'") as batch:
            client.search_batch([{"query": "w1"}, {"query": "w2", "filters": {"year": 1}}, {"query": "w3", "filters": bad}],
                                mode=mode)
        assert batch.value.stage == stage
        assert isinstance(batch.value.cause, KolmError)


# -- filters that cost what they select (issue 25, defect 7) -----------------------------------
ROWS = st.lists(st.integers(0, 63), max_size=64, unique=True).map(sorted)


def _sel(kind: str, rows: list[int], n: int = 64) -> Any:
    from kolm_search.engine.selection import Selection

    mask = np.zeros(n, bool)
    mask[rows] = True
    return Selection.of_rows(rows, n) if kind == "rows" else Selection.of_mask(mask)


@settings(max_examples=150, deadline=None)
@given(ROWS, ROWS, st.sampled_from(["rows", "mask"]), st.sampled_from(["rows", "mask"]))
def test_selections_combine_as_masks_do_and_stay_small_as_rows(a: list[int], b: list[int], ka: str, kb: str) -> None:
    from kolm_search.engine.selection import ROWS_SHARE

    x, y = _sel(ka, a), _sel(kb, b)
    ma, mb = x.as_mask(), y.as_mask()
    for got, want in ((x.intersect(y), ma & mb), (x.union(y), ma | mb), (x.invert(), ~ma), (y.invert(), ~mb)):
        np.testing.assert_array_equal(got.as_mask(), want)
        assert got.count() == int(want.sum())
        assert (got.rows is not None) == (int(want.sum()) <= 64 * ROWS_SHARE)  # rows iff few match
        assert (got.rows is None) != (got.mask is None)
        if got.rows is not None:
            assert np.all(np.diff(got.rows) > 0)


def _id_table(n: int) -> DocumentTable:
    return DocumentTable.from_documents([SearchDocument(id=f"d{i}", content="x", tags=["even" if i % 2 else "odd"],
                                                        metadata={"year": 1900 + i % 100}) for i in range(n)])


def test_a_batch_of_distinct_small_filters_costs_what_it_matches() -> None:
    """On main each distinct filter was a uint8 mask over the table: 400 queries x 20,000
    documents = 8 MB here (2.7 GiB for 5,000 x 200k). Two-id filters are now 16 bytes of rows each."""
    from kolm_search.retrievers._batching import filter_selections

    n, rng = 20_000, np.random.default_rng(4)
    table = _id_table(n)
    pairs = rng.integers(0, n, (400, 2))
    filters = [{"id": {"$in": [f"d{a}", f"d{b}"]}} for a, b in pairs]
    sel = filter_selections(table, filters)
    assert sel.masks.shape == (1, 1) and (sel.mask_of == -1).all()  # no mask at all
    assert sel.nbytes <= 400 * (2 * 8 + 8 + 8 + 8) + 64  # rows, ptr, mask_of and ids: grows with the matches
    for i, f in enumerate(filters):
        np.testing.assert_array_equal(sel.mask(i, n), table.filter_mask(f))
    equal = filter_selections(table, [{"tags": "even"}, {"id": "d3"}, {"tags": "even"}, {}, {"id": "d3"}])
    assert equal.ids.tolist() == [0, 1, 0, -1, 1] and len(equal.mask_of) == 2  # equal filters share one
    assert equal.mask_of.tolist() == [0, -1] and equal.masks.shape == (1, n)  # a mask only for the large one


def test_the_representation_switches_at_rows_share() -> None:
    from kolm_search.engine.selection import ROWS_SHARE
    from kolm_search.retrievers._batching import filter_selections

    n = 1600
    table = _id_table(n)
    cut = int(n * ROWS_SHARE)  # 100
    small = {"id": {"$in": [f"d{i}" for i in range(cut)]}}
    large = {"id": {"$in": [f"d{i}" for i in range(cut + 1)]}}
    by_not = {"id": {"$nin": [f"d{i}" for i in range(n - cut)]}}  # a negation that leaves few
    sel = filter_selections(table, [small, large, by_not, {"year": {"$gte": 1999}}, {"year": {"$gte": 1910}}])
    assert sel.mask_of.tolist() == [-1, 0, -1, -1, 1]
    for i, f in enumerate([small, large, by_not, {"year": {"$gte": 1999}}, {"year": {"$gte": 1910}}]):
        np.testing.assert_array_equal(sel.mask(i, n), table.filter_mask(f))


def _expected(f: dict[str, Any]) -> np.ndarray:
    """The documents of CORPUS one of these filters keeps, from the documents themselves."""
    keep = []
    for d in CORPUS:
        if "year" in f:
            keep.append(d.metadata["year"] >= f["year"]["$gte"])  # type: ignore[index]
        elif "tags" in f:
            keep.append(d.id == f["id"] and "even" in (d.tags or []))
        elif "id" in f:
            keep.append(d.id in f["id"]["$in"])
        else:
            keep.append(True)
    return np.array(keep)


@functools.cache
def _retriever(kind: str) -> tuple[BatchHashEmbedder, Any]:
    """One retriever per kind over CORPUS for the whole module (they are never changed)."""
    from kolm_search.retrievers.feedback import FeedbackRetriever

    emb = BatchHashEmbedder()
    return emb, {"bm25": lambda: BM25Retriever(CORPUS), "dense": lambda: DenseRetriever(CORPUS, emb),
                 "feedback": lambda: FeedbackRetriever(BM25Retriever(CORPUS), "bo1")}[kind]()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.lists(st.integers(0, 299), min_size=1, max_size=3).map(lambda r: {"id": {"$in": [f"doc-{i}" for i in r]}}),
    st.integers(0, 299).map(lambda i: {"id": f"doc-{i}", "tags": "even"}),
    st.integers(1990, 2019).map(lambda y: {"year": {"$gte": y}}),
    st.just({})), min_size=1, max_size=12), st.sampled_from(["bm25", "dense", "feedback"]))
def test_distinct_filters_per_query_give_the_brute_force_ranking(filters: list[dict[str, Any]], kind: str) -> None:
    """Every query with its own filter (rows or masks, row-by-row or scanned): the top-k of
    the unfiltered full ranking restricted to the filter's documents, bit for bit (BM25)."""
    emb, ret = _retriever(kind)
    texts = [E2E_QUERIES[i % len(E2E_QUERIES)] for i in range(len(filters))]
    k = 5
    frame = ret.retrieve_batch(QueryBatch(texts=texts, owner=np.arange(len(texts)), n_queries=len(texts), limit=k,
                                          filters=filters, mode="fulltext" if kind != "dense" else "vector",
                                          embeddings=emb.embed_many(texts) if kind == "dense" else None))
    for q, f in enumerate(filters):
        mask = _expected(f)
        got = ret.table.ids[frame.doc[frame.ptr[q]:frame.ptr[q + 1]]].tolist()
        if kind == "bm25":
            want_ids, want_scores = brute_bm25(ret, texts[q], mask)
            assert got == want_ids[:k]
            assert frame.score[frame.ptr[q]:frame.ptr[q + 1]].astype(np.float32).tobytes() == want_scores[:k].tobytes()
        elif kind == "dense":
            want_ids, want_scores = brute_dense(ret, emb.embed_many([texts[q]])[0], mask)
            assert_ranking(got, frame.score[frame.ptr[q]:frame.ptr[q + 1]], want_ids, want_scores, k)
        else:  # the second pass is BM25 on the expanded query, under the same filter
            alone = ret.retrieve_batch(QueryBatch(texts=[texts[q]], owner=[0], n_queries=1, limit=k, filters=[f],
                                                  mode="fulltext"))
            assert got == ret.table.ids[alone.doc].tolist()
            assert all(mask[int(i[4:])] for i in got)
