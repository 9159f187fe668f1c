"""Incremental indexes: add/delete/merge/save-load sequences give exactly the index rebuilt
from scratch over the surviving documents (the oracle), for every BM25 variant and dense."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import presets
from kolm_search.contract.client import SearchClient
from kolm_search.contract.config import SearchPipelineModules
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers.bm25 import BM25_METHODS, BM25Retriever, CollectionStats
from kolm_search.retrievers.bm25_saved import VERSION
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from tests.fakes import HashEmbedder, MemoryCache
from tests.reliability.indexes import as_legacy, file_of, reseal

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "zeta"]
QUERIES = ["alpha", "beta gamma", "delta delta omega", "zeta alpha beta gamma", "unknownword", "gamma beta"]

doc_spec = st.tuples(st.lists(st.sampled_from(WORDS), max_size=7), st.booleans(), st.booleans())
op = st.one_of(st.tuples(st.just("add"), st.lists(doc_spec, max_size=4)),
               st.tuples(st.just("delete"), st.lists(st.integers(0, 99), max_size=3)),
               st.tuples(st.sampled_from(["merge", "save", "check"]), st.none()))


class Model:
    """The plain-Python oracle state: the live documents in rebuild order."""

    def __init__(self, specs: list[tuple[list[str], bool, bool]]) -> None:
        self.live: list[dict[str, Any]] = []
        self.dead: list[str] = []
        self.counter = 0
        self.add(specs)

    def add(self, specs: list[tuple[list[str], bool, bool]]) -> list[dict[str, Any]]:
        new = []
        for words, even, reuse in specs:
            if reuse and self.dead:
                doc_id = self.dead.pop()
            else:
                doc_id, self.counter = f"n{self.counter}", self.counter + 1
            new.append({"id": doc_id, "content": " ".join(words), "tags": ["even" if even else "odd"]})
        self.live += new
        return new

    def delete(self, picks: list[int]) -> list[str]:
        if not self.live:
            return []
        ids = list(dict.fromkeys(self.live[p % len(self.live)]["id"] for p in picks))
        self.live = [d for d in self.live if d["id"] not in ids]
        self.dead += ids
        return ids


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except (KolmValueError, KolmTypeError) as exc:
        return type(exc)


def _client(retriever: Any) -> SearchClient:
    return SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=retriever),
                        {"default_mode": "fulltext"})


def assert_same_bm25(inc: BM25Retriever, live: list[dict[str, Any]], *, clients: bool = False) -> None:
    ref = BM25Retriever(live, method=inc.method)
    assert inc.table.ids.tolist() == [d["id"] for d in live]
    assert len(inc.vocab) == len(ref.vocab)  # terms left without documents are dropped
    assert dict(zip(inc.vocab, np.diff(inc.t_ptr).tolist(), strict=True)) == dict(
        zip(ref.vocab, np.diff(ref.t_ptr).tolist(), strict=True))
    assert np.array_equal(inc.doc_len, ref.doc_len)
    k = max(len(live), 1)
    for got, want in zip(inc.score_texts(QUERIES, k), ref.score_texts(QUERIES, k), strict=True):
        assert np.array_equal(got, want)  # documents, float32 scores bit for bit, tie order, counts
    if clients:
        a, b = _client(inc), _client(ref)
        for filters in (None, {"tags": "even"}):
            ra = _outcome(lambda c=a, f=filters: c.search_batch(QUERIES, limit=10, filters=f).run)
            rb = _outcome(lambda c=b, f=filters: c.search_batch(QUERIES, limit=10, filters=f).run)
            if isinstance(ra, pd.DataFrame):
                pd.testing.assert_frame_equal(ra, rb)
            else:
                assert ra == rb
        if live:
            one = a.search_sync({"query": "beta gamma", "filters": {"tags": "odd"}})
            two = b.search_sync({"query": "beta gamma", "filters": {"tags": "odd"}})
            assert [(d.id, d.score) for d in one.results] == [(d.id, d.score) for d in two.results]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(BM25_METHODS), st.lists(doc_spec, max_size=6), st.lists(op, max_size=8))
def test_bm25_updates_equal_a_rebuild(method: str, initial: list[Any], ops: list[Any]) -> None:
    model = Model(initial)
    inc = BM25Retriever(list(model.live), method=method)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (kind, arg) in enumerate(ops):
            if kind == "add":
                inc.add(model.add(arg))
            elif kind == "delete":
                ids = model.delete(arg)
                inc.delete(ids)
            elif kind == "merge":
                inc.merge()
            elif kind == "save":
                inc.save(Path(tmp) / str(i))
                inc = BM25Retriever.load(Path(tmp) / str(i), mmap=True)
            else:
                assert_same_bm25(inc, model.live)
        assert_same_bm25(inc, model.live, clients=True)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["cosine", "ip"]), st.lists(doc_spec, max_size=6), st.lists(op, max_size=8),
       st.booleans())
def test_dense_updates_equal_a_rebuild(metric: str, initial: list[Any], ops: list[Any], given_vectors: bool) -> None:
    emb = HashEmbedder()
    model = Model(initial)
    inc = DenseRetriever(list(model.live), emb, metric=metric)  # type: ignore[arg-type]
    queries = np.array([emb.vector(q) for q in QUERIES], np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (kind, arg) in enumerate([*ops, ("check", None)]):
            if kind == "add":
                new = model.add(arg)
                vectors = np.array([emb.vector(d["content"]) for d in new]).reshape(len(new), emb.dim)
                inc.add(new, embeddings=vectors * 2.0 if given_vectors and metric == "cosine" else
                        vectors if given_vectors else None)  # a power-of-two scale normalises exactly
            elif kind == "delete":
                inc.delete(model.delete(arg))
            elif kind == "merge":
                inc.merge()
            elif kind == "save":
                inc.save(Path(tmp) / str(i))
                inc = DenseRetriever.load(Path(tmp) / str(i), emb, mmap=True)
            else:
                assert inc.table.ids.tolist() == [d["id"] for d in model.live]
                if not model.live:  # a rebuild over no documents has no dimension
                    continue
                ref = DenseRetriever(list(model.live), emb, metric=metric)  # type: ignore[arg-type]
                assert np.array_equal(inc.embeddings, ref.embeddings)
                k = max(len(model.live), 1)
                for got, want in zip(inc.search_vectors(queries, k), ref.search_vectors(queries, k), strict=True):
                    assert np.array_equal(got, want)


def _docs(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"d{i}", "content": " ".join(WORDS[j % 6] for j in range(i, i + 1 + i % 4)),
             "tags": ["even" if i % 2 == 0 else "odd"]} for i in range(start, start + n)]


def _results(client: SearchClient, query: str = "alpha beta gamma") -> list[tuple[str, float | None]]:
    return [(d.id, d.score) for d in client.search_sync({"query": query, "limit": 20}).results]


def test_hybrid_client_add_delete_equals_a_rebuild_and_keeps_one_table() -> None:
    emb = HashEmbedder()
    client = presets.hybrid(_docs(12), emb)
    before = client.pipeline.modules.retriever
    client.add(_docs(5, start=12))
    client.delete(["d0", "d13", "d7"])
    live = [d for d in _docs(17) if d["id"] not in ("d0", "d13", "d7")]
    assert _results(client) == _results(presets.hybrid(live, emb))
    after = client.pipeline.modules.retriever
    assert after is not before and len(before.table) == 12  # copy-on-write: the old one is untouched
    sparse, dense = after.retrievers
    assert sparse.table is dense.table and after.table is sparse.table  # still one shared table
    assert before.retrievers[0].table is before.retrievers[1].table


def test_composite_add_is_all_or_nothing() -> None:
    emb = HashEmbedder()
    sparse, dense = BM25Retriever(_docs(6)), DenseRetriever(_docs(6), emb)
    comp = CompositeRetriever([sparse, dense])
    with pytest.raises(KolmValueError, match="add: embeddings must have shape"):
        comp.add(_docs(2, start=6), embeddings=np.ones((3, emb.dim)))
    with pytest.raises(KolmValueError, match="'d1' is already"):
        comp.add(_docs(2, start=1))
    assert len(sparse.table) == len(dense.table) == 6
    comp.add(_docs(2, start=6))
    comp.delete(["d2"])
    comp.merge()
    assert sparse.table is dense.table and sparse.table.ids.tolist() == ["d0", "d1", "d3", "d4", "d5", "d6", "d7"]
    from tests.fakes import ListRetriever

    with pytest.raises(KolmTypeError, match="ListRetriever does not support add/delete"):
        CompositeRetriever([BM25Retriever(_docs(3)), ListRetriever()]).add(_docs(1, start=3))


def test_cached_client_serves_no_stale_results_after_a_change() -> None:
    cache = MemoryCache()
    client = presets.bm25(_docs(6))
    client.pipeline.modules.cache = cache
    first = client.search_sync({"query": "omega"})
    assert client.search_sync({"query": "omega"}).metadata.cache_hit
    client.add([{"id": "new", "content": "omega omega omega"}])
    fresh = client.search_sync({"query": "omega"})
    assert not fresh.metadata.cache_hit and fresh.results[0].id == "new"
    assert "new" not in [d.id for d in first.results]
    client.delete(["new"])
    assert [d.id for d in client.search_sync({"query": "omega"}).results] == [d.id for d in first.results]


def test_errors_name_the_ids_and_change_nothing() -> None:
    r = BM25Retriever(_docs(5))
    want = r.score_texts(QUERIES, 5)
    with pytest.raises(KolmValueError, match=r"delete: 2 unknown document id\(s\): \['nope', 'zip'\]"):
        r.delete(["d1", "nope", "zip"])
    with pytest.raises(KolmValueError, match="add: document id 'd3' is already in the index"):
        r.add(_docs(2, start=3))
    with pytest.raises(KolmValueError, match="add: duplicate document id 'x'"):
        r.add([{"id": "x", "content": "alpha"}, {"id": "x", "content": "beta"}])
    with pytest.raises(KolmValueError, match="add: document 0: SearchDocument needs string .id. and .content."):
        r.add([{"id": "y", "content": 5}])
    with pytest.raises(KolmValueError, match="delete: document id 'd1' is given twice"):
        r.delete(["d1", "d1"])
    with pytest.raises(KolmTypeError, match="delete: ids must be a list"):
        r.delete("d1")
    for bad in ("alpha beta", {"id": "z", "content": "alpha"}, 5):
        with pytest.raises(KolmTypeError, match="add: documents must be"):
            r.add(bad)
    with pytest.raises(KolmTypeError, match="add: document 0: a SearchDocument must be a mapping, got str"):
        r.add(["alpha", 5])
    for got, exp in zip(r.score_texts(QUERIES, 5), want, strict=True):
        assert np.array_equal(got, exp)
    r.delete(["d1"])
    with pytest.raises(KolmValueError, match=r"unknown document id\(s\): \['d1'\]"):
        r.delete(["d1"])  # already deleted (pending)
    r.add([{"id": "d1", "content": "zeta"}])  # delete then add: a replacement
    assert_same_bm25(r, [d for d in _docs(5) if d["id"] != "d1"] + [{"id": "d1", "content": "zeta"}])


def test_dense_add_errors() -> None:
    emb = HashEmbedder()
    r = DenseRetriever(_docs(4), emb)
    with pytest.raises(KolmValueError, match="NaN or infinite"):
        r.add(_docs(1, start=4), embeddings=np.full((1, emb.dim), np.nan))
    with pytest.raises(KolmValueError, match=r"shape \(1, 8\), got \(1, 3\)"):
        r.add(_docs(1, start=4), embeddings=np.ones((1, 3)))
    with pytest.raises(KolmTypeError, match="embeddings given but no dense retriever takes them"):
        from kolm_search.retrievers.incremental import add

        add([BM25Retriever(_docs(2))], _docs(1, start=2), np.ones((1, 8)))
    bare = DenseRetriever(_docs(4), embeddings=np.eye(4, 8))
    with pytest.raises(KolmValueError, match="no embedder; pass embeddings="):
        bare.add(_docs(1, start=4))
    assert len(r.table) == len(bare.table) == 4


def _tokens(docs: list[dict[str, Any]]) -> list[list[str]]:
    tok = Tokenizer()
    return [tok(d["content"]) for d in docs]


def test_shard_refuses_changes(tmp_path: Path) -> None:
    docs = _docs(10)
    shard = BM25Retriever(docs[:5], stats=CollectionStats.from_tokens(_tokens(docs)))
    with pytest.raises(KolmValueError, match="external collection statistics"):
        shard.add(_docs(1, start=10))
    with pytest.raises(KolmValueError, match="external collection statistics"):
        shard.delete(["d1"])
    shard.save(tmp_path / "s")
    with pytest.raises(KolmValueError, match="external collection statistics"):
        BM25Retriever.load(tmp_path / "s").delete(["d1"])


def _as_version_1(path: Path) -> None:
    as_legacy(path, 1)


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_version_1_index_is_recounted_once_then_changes(tmp_path: Path, method: str) -> None:
    BM25Retriever(_docs(8), method=method).save(tmp_path / "v1")  # type: ignore[arg-type]
    _as_version_1(tmp_path / "v1")
    old = BM25Retriever.load(tmp_path / "v1")
    assert old.tf is None and old.own_stats is None
    old.add(_docs(3, start=8))
    old.delete(["d2"])
    assert_same_bm25(old, [d for d in _docs(11) if d["id"] != "d2"], clients=True)
    old.save(tmp_path / "v2")
    again = BM25Retriever.load(tmp_path / "v2")
    assert again.tf is not None and json.loads((tmp_path / "v2" / "manifest.json").read_text())["version"] == VERSION
    again.delete(["d0"])
    assert_same_bm25(again, [d for d in _docs(11) if d["id"] not in ("d2", "d0")])


def test_version_1_shard_is_refused(tmp_path: Path) -> None:
    docs = _docs(10)
    BM25Retriever(docs[:5], stats=CollectionStats.from_tokens(_tokens(docs))).save(tmp_path / "s")
    _as_version_1(tmp_path / "s")
    shard = BM25Retriever.load(tmp_path / "s")
    with pytest.raises(KolmValueError, match="does not match its own documents' statistics"):
        shard.add(_docs(1, start=10))
    assert len(shard.table) == 5


def test_saved_term_frequencies_are_checked(tmp_path: Path) -> None:
    BM25Retriever(_docs(6)).save(tmp_path / "i")
    path = file_of(tmp_path / "i", "tf")
    tf = np.load(path)
    tf[0] += 1
    np.save(path, tf)
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: content differs from the sha256"):
        BM25Retriever.load(tmp_path / "i")
    reseal(tmp_path / "i")  # the manifest rewritten too: the counts themselves are refused
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: term frequencies of document row \d+ sum to"):
        BM25Retriever.load(tmp_path / "i")
    np.save(path, np.zeros_like(tf))
    reseal(tmp_path / "i")
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: term frequency 0 at position 0"):
        BM25Retriever.load(tmp_path / "i")
    path.unlink()
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: file missing"):
        BM25Retriever.load(tmp_path / "i")


def test_pending_changes_are_merged_by_save_and_mmap_load_continues(tmp_path: Path) -> None:
    r = BM25Retriever(_docs(6), method="bm25l")
    r.add(_docs(2, start=6))
    r.delete(["d0", "d6"])
    r.save(tmp_path / "i")
    loaded = BM25Retriever.load(tmp_path / "i", mmap=True)
    assert isinstance(loaded.t_w, np.memmap) and isinstance(loaded.tf, np.memmap)
    loaded.add(_docs(1, start=8))
    loaded.delete(["d3"])
    live = [d for d in _docs(9) if d["id"] not in ("d0", "d6", "d3")]
    assert_same_bm25(loaded, live)
    assert isinstance(BM25Retriever.load(tmp_path / "i").t_w, np.memmap)  # the saved files are intact


def test_pending_changes_survive_pickling() -> None:
    import pickle

    r = BM25Retriever(_docs(6), method="atire")
    r.add(_docs(2, start=6))
    r.delete(["d1"])
    clone = pickle.loads(pickle.dumps(r))
    assert_same_bm25(clone, [d for d in _docs(8) if d["id"] != "d1"])
    client = pickle.loads(pickle.dumps(presets.bm25(_docs(4))))
    client.add(_docs(1, start=4))
    assert len(client.pipeline.modules.retriever.table) == 5


def test_client_updates_while_other_threads_search() -> None:
    import threading

    client = presets.hybrid(_docs(20), HashEmbedder())
    errors: list[BaseException] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            try:
                ids = [d.id for d in client.search_sync({"query": "alpha beta", "limit": 30}).results]
                batch = client.search_batch(["gamma", "delta omega"], limit=30).run
                assert len(set(ids)) == len(ids) and set(batch["doc_id"]) <= {f"d{i}" for i in range(40)}
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(20, 40, 2):
            client.add(_docs(2, start=i))
            client.delete([f"d{i - 20}"])
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors[0]
    live = [d for d in _docs(40) if d["id"] not in {f"d{i - 20}" for i in range(20, 40, 2)}]
    assert client.pipeline.modules.retriever.table.ids.tolist() == [d["id"] for d in live]
    assert _results(client) == _results(presets.hybrid(live, HashEmbedder()))


def test_client_without_updatable_retriever_and_stale_token_ids() -> None:
    from tests.fakes import ListRetriever

    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": ListRetriever()})
    before = client.pipeline.modules.retriever
    with pytest.raises(KolmTypeError, match="ListRetriever does not support add/delete"):
        client.add(_docs(1))
    assert client.pipeline.modules.retriever is before
    r = BM25Retriever([{"id": "a", "content": "alpha"}, {"id": "b", "content": "beta"},
                       {"id": "c", "content": "zeta omega"}])
    q_ptr, q_ids = r.encode(["zeta omega"])
    r.delete(["c"])  # 'zeta' and 'omega' leave the vocabulary
    r.merge()
    assert len(r.vocab) == 2
    with pytest.raises(KolmValueError, match="encode again after add/delete"):
        r.score_encoded(q_ptr, q_ids, 5)


@pytest.mark.parametrize("model", ["rm3", "bo1", "kl"])
def test_feedback_clients_take_changes_through_their_index(model: str) -> None:
    """A FeedbackRetriever (alone, or a composite's child) passes add/delete to its BM25 index:
    results and expanded queries equal those of a client built over the surviving documents."""
    emb = HashEmbedder()
    words = ["alpha", "beta", "gamma", "delta", "omega", "zeta"]
    docs = [{"id": f"d{i}", "content": " ".join(words[(i * j) % 6] for j in range(1, 2 + i % 5))} for i in range(30)]
    extra = [{"id": f"n{i}", "content": f"omega {words[i % 6]} zeta"} for i in range(6)]
    live = [d for d in docs + extra if d["id"] not in ("d1", "n2", "d17")]
    for make in (lambda d: presets.bm25(d, feedback=model),
                 lambda d: SearchClient(SearchPipelineModules(
                     planner=DefaultQueryPlanner(), retriever=CompositeRetriever(
                         [FeedbackRetriever(BM25Retriever(d), model), DenseRetriever(d, emb)]), embedder=emb),
                     {"default_mode": "hybrid"})):
        client = make(docs)
        client.pipeline.modules.cache = MemoryCache()
        before = _results(client, "omega zeta")
        client.add(extra)
        client.delete(["d1", "n2", "d17"])
        rebuilt = make(live)
        for query in ("omega zeta", "alpha beta", "gamma"):
            got = client.search_sync({"query": query, "limit": 20})
            want = rebuilt.search_sync({"query": query, "limit": 20})
            assert [(d.id, d.score) for d in got.results] == [(d.id, d.score) for d in want.results]
            assert got.metadata.feedback == want.metadata.feedback and not got.metadata.cache_hit
        assert before != _results(client, "omega zeta")
