"""Approximate dense indexes on faiss (DenseRetriever(index=...)): recall against the exact kernel
(the oracle), filters, add/delete, one faiss call per batch, saving and the checks on load."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import DenseRetriever, KolmValueError
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.selection import Selection, Selections
from kolm_search.retrievers.dense import exact_topk
from tests.reliability.indexes import file_of, reseal

faiss = pytest.importorskip("faiss")

N, DIM, K = 8_000, 32, 100
KINDS = ("hnsw", "ivf", "ivfpq")


def mixture(n: int, d: int, seed: int, per_cluster: int = 50, topics: int = 40) -> np.ndarray:
    """Unit vectors of a two-level Gaussian mixture (topics, clusters of ~``per_cluster``
    points around them): neighbours span clusters, as text embeddings' do."""
    rng = np.random.default_rng(seed)
    t = rng.standard_normal((topics, d), dtype=np.float32)
    c = t[rng.integers(0, topics, max(1, n // per_cluster))] + 0.6 * rng.standard_normal((max(1, n // per_cluster), d),
                                                                                        dtype=np.float32)
    x = c[rng.integers(0, len(c), n)] + 0.8 * rng.standard_normal((n, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def recall(got: np.ndarray, want: np.ndarray, counts: np.ndarray | None = None) -> float:
    """Mean share of each exact list found (``counts``: the exact lists' lengths)."""
    out = []
    for i in range(len(want)):
        w = want[i][want[i] >= 0] if counts is None else want[i][: counts[i]]
        out.append(len(np.intersect1d(got[i][got[i] >= 0], w)) / max(len(w), 1))
    return float(np.mean(out))


@pytest.fixture(scope="module")
def data() -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    x = mixture(N + 200, DIM, 0)
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(N)], "content": [""] * N, "group": [i % 10 for i in range(N)]})
    return frame, x[:N], x[N:]


@pytest.fixture(scope="module")
def built(data: Any) -> dict[str, DenseRetriever]:
    frame, docs, _ = data
    return {kind: DenseRetriever(frame, embeddings=docs, index=kind) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_default_parameters_reach_recall_95(built: dict[str, DenseRetriever], data: Any, kind: str) -> None:
    _, docs, queries = data
    want, want_scores, _ = exact_topk(queries, docs, K)
    got, scores, counts = built[kind].search_vectors(queries, K)
    assert (counts == K).all()
    assert recall(got, want) >= 0.95
    # scores are exact inner products of the documents returned, best first
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, docs[got]), rtol=1e-4, atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    assert built[kind].ann.spec.params["train_size"] <= N  # trained on a sample of at most the corpus


def test_ip_metric_and_a_factory_string(data: Any) -> None:
    frame, docs, queries = data
    raw = docs * np.random.default_rng(1).uniform(0.5, 2.0, (len(docs), 1)).astype(np.float32)
    ret = DenseRetriever(frame, embeddings=raw, metric="ip", index="IVF64,SQ8", nprobe=16, rerank=2)
    want, _, _ = exact_topk(queries, raw, K)
    got, _, _ = ret.search_vectors(queries, K)
    assert recall(got, want) >= 0.9
    assert ret.ann.spec.factory == "IVF64,SQ8" and ret.ann.top.nprobe == 16


def _filtered(n_queries: int, mask: np.ndarray, rows: np.ndarray) -> Selections:
    """Half the queries under a broad mask filter, the others under a filter of few rows."""
    chosen = [Selection.of_mask(mask), Selection.of_rows(rows, len(mask))]
    assert chosen[0].mask is not None and chosen[1].rows is not None
    return Selections.build(np.arange(n_queries) % 2, chosen)


@pytest.mark.parametrize("kind", [*KINDS, "PCA24,IVF32,Flat"])
def test_filters_return_only_matching_documents(built: dict[str, DenseRetriever], data: Any, kind: str) -> None:
    frame, docs, queries = data
    ret = built.get(kind) or DenseRetriever(frame, embeddings=docs, index=kind, nprobe=8)
    rng = np.random.default_rng(3)
    mask = rng.random(N) < 0.3
    rows = np.sort(rng.choice(N, 40, replace=False))
    sel = _filtered(len(queries), mask, rows)
    got, _, counts = ret.search_vectors(queries, K, sel)
    allowed = [mask, np.isin(np.arange(N), rows)]
    for i in range(len(queries)):
        hits = got[i][: counts[i]]
        assert allowed[i % 2][hits].all() and (got[i][counts[i]:] == -1).all()
        assert len(np.unique(hits)) == len(hits)
    assert (counts[1::2] == 40).all()  # few rows: searched exactly, every one returned (limit 100)
    want, _, want_counts = exact_topk(queries, docs, K, selections=sel)
    assert recall(got[1::2], want[1::2], want_counts[1::2]) == 1.0
    assert recall(got[::2], want[::2], want_counts[::2]) >= 0.85  # a broad filter: faiss's own selector


def test_filters_through_the_batch_path(built: dict[str, DenseRetriever], data: Any) -> None:
    _, _, queries = data
    ret = built["hnsw"]
    batch = QueryBatch(texts=["q"] * 4, owner=np.arange(4), n_queries=4, limit=20, mode="vector",
                       filters=[{}, {"group": 3}, {"group": {"$in": [1, 2]}}, {"id": ["d5", "d7"]}],
                       embeddings=queries[:4])
    frame = ret.retrieve_batch(batch)
    groups = np.asarray(ret.table.field_values("group"))[frame.doc]
    for q, test in enumerate([None, lambda g: g == 3, lambda g: np.isin(g, [1, 2]), None]):
        assert (frame.query == q).sum() == (2 if q == 3 else 20)  # up to the limit
        if test is not None:
            assert test(groups[frame.query == q]).all()
    assert sorted(ret.table.ids[frame.doc[frame.query == 3]].tolist()) == ["d5", "d7"]


class _CountingIndex:
    """A faiss index that counts its ``search`` calls (delegating everything)."""

    def __init__(self, index: Any) -> None:
        self._index, self.calls = index, 0

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._index.search(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


@pytest.mark.parametrize("kind", KINDS)
def test_one_faiss_call_per_batch(built: dict[str, DenseRetriever], data: Any, kind: str) -> None:
    _, _, queries = data
    ret = copy.copy(built[kind])
    ret.ann = copy.copy(ret.ann)
    spy = ret.ann.index = _CountingIndex(ret.ann.index)
    ret.search_vectors(queries, K)
    assert spy.calls == 1
    shared = Selections.build(np.zeros(len(queries), np.int64), [Selection.of_mask(np.arange(N) % 3 > 0)])
    ret.search_vectors(queries, K, shared)
    assert spy.calls == 2  # one filter shared by the batch: still one call


def test_add_and_delete(data: Any) -> None:
    frame, docs, queries = data
    n0 = 5000
    ret = DenseRetriever(frame.iloc[:n0], embeddings=docs[:n0], index="hnsw")
    ret.add(frame.iloc[n0:], embeddings=docs[n0:])
    gone = [f"d{i}" for i in range(0, N, 7)]
    ret.delete(gone)
    live = np.setdiff1d(np.arange(N), np.arange(0, N, 7))
    assert ret.table.ids.tolist() == [f"d{i}" for i in live]
    assert ret.ann.n_live == len(live) and len(ret.ann.live) == N  # deletions as dead slots
    # deleted documents are never returned, even for their own vector; added ones are found
    own = docs[[0, 7, n0 + 2, n0 + 3]]  # 0 and 7 deleted, 5002 and 5003 added
    got, _, counts = ret.search_vectors(own, K)
    ids = ret.table.ids
    for i in range(len(own)):
        assert not set(ids[got[i][: counts[i]]]) & set(gone)
    assert ids[got[2][0]] == f"d{n0 + 2}" and ids[got[3][0]] == f"d{n0 + 3}"
    want, _, _ = exact_topk(queries, ret.embeddings, K)  # the oracle: exact over the live documents
    assert recall(ret.search_vectors(queries, K)[0], want) >= 0.95
    # past half dead, a merge rebuilds the index over the live documents
    ret.delete([f"d{i}" for i in live[: len(live) * 2 // 3]])
    assert len(ret.ann.live) == ret.ann.n_live == len(ret.table) == len(live) - len(live) * 2 // 3
    want, _, _ = exact_topk(queries, ret.embeddings, K)
    assert recall(ret.search_vectors(queries, K)[0], want) >= 0.95


def test_copies_keep_their_index_and_pickles_travel(data: Any) -> None:
    frame, docs, queries = data
    ret = DenseRetriever(frame.iloc[:2000], embeddings=docs[:2000], index="ivf")
    before = ret.search_vectors(queries, 10)
    other = copy.copy(ret)
    other.add(frame.iloc[2000:2100], embeddings=docs[2000:2100])
    assert len(ret.ann.live) == 2000 and len(other.ann.live) == 2100
    for a, b in zip(ret.search_vectors(queries, 10), before, strict=True):
        np.testing.assert_array_equal(a, b)
    back = pickle.loads(pickle.dumps(ret))
    for a, b in zip(back.search_vectors(queries, 10), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_empty_corpus_builds_on_first_add(data: Any) -> None:
    frame, docs, queries = data
    ret = DenseRetriever(frame.iloc[:0], embeddings=np.zeros((0, 0), np.float32), index="ivf")
    assert ret.ann is None
    ret.add(frame.iloc[:500], embeddings=docs[:500])
    assert ret.ann is not None and ret.ann.n_live == 500
    assert ret.search_vectors(queries[:3], 5)[2].tolist() == [5, 5, 5]


@pytest.mark.parametrize("kind", KINDS)
def test_save_and_load(built: dict[str, DenseRetriever], data: Any, tmp_path: Path, kind: str) -> None:
    _, _, queries = data
    ret = built[kind]
    ret.save(tmp_path / "ix")
    loaded = DenseRetriever.load(tmp_path / "ix")
    assert loaded.index == kind and loaded.ann.spec == ret.ann.spec
    for a, b in zip(loaded.search_vectors(queries, K), ret.search_vectors(queries, K), strict=True):
        np.testing.assert_array_equal(a, b)


def _edit(root: Path, change: Any) -> None:
    path = root / "manifest.json"
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body))


@pytest.mark.parametrize("damage, message", [
    (lambda b: b["ann"].update(faiss_version="1.7.0"), r"saved by faiss '1\.7\.0', this is faiss"),
    (lambda b: b["ann"]["structure"].update(nlist=5), r"nlist is \d+; manifest key 'ann.structure.nlist' says 5"),
    (lambda b: b["ann"]["params"].update(nlist=5), r"key 'ann.factory' is 'IVF\d+,Flat'; its parameters"),
    (lambda b: b["ann"]["params"].update(nprobe=0), r"'ann.params' must be an object of positive integers"),
    (lambda b: b["ann"].update(index="HNSW8"), r"key 'ann.factory' is 'IVF\d+,Flat', not key 'ann.index' 'HNSW8'"),
    (lambda b: b["ann"].update(given={"ef_search": 3}), r"index='ivf' takes the parameters"),
    (lambda b: b["ann"].pop("factory"), r"key 'ann.factory' is missing"),
    (lambda b: b["files"].pop("ann"), r"key 'files.ann' is missing"),
])
def test_a_damaged_manifest_is_refused(data: Any, tmp_path: Path, damage: Any, message: str) -> None:
    frame, docs, _ = data
    DenseRetriever(frame.iloc[:1000], embeddings=docs[:1000], index="ivf").save(tmp_path / "ix")
    _edit(tmp_path / "ix", damage)
    with pytest.raises(KolmValueError, match=message):
        DenseRetriever.load(tmp_path / "ix")


def test_files_that_do_not_match_the_manifest_are_refused(data: Any, tmp_path: Path) -> None:
    frame, docs, _ = data
    root = tmp_path / "ix"
    DenseRetriever(frame.iloc[:1000], embeddings=docs[:1000], index="ivf").save(root)
    ivf = file_of(root, "ann")
    kept = ivf.read_bytes()
    other = DenseRetriever(frame.iloc[:1000], embeddings=docs[:1000], index="ivf", nlist=7)
    np.save(ivf, faiss.serialize_index(other.ann.index))  # another index, digests resealed
    reseal(root)
    with pytest.raises(KolmValueError, match=r"ann\.[0-9a-f]{32}\.npy: the faiss index's nlist is 7"):
        DenseRetriever.load(root)
    fewer = DenseRetriever(frame.iloc[:999], embeddings=docs[:999], index="ivf")
    np.save(ivf, faiss.serialize_index(fewer.ann.index))
    reseal(root)
    with pytest.raises(KolmValueError, match=r"has ntotal 999, expected 1000"):
        DenseRetriever.load(root)
    ivf.write_bytes(kept)
    np.save(file_of(root, "ann_live"), np.ones(1000, np.uint8) * 2)
    reseal(root)
    with pytest.raises(KolmValueError, match=r"must be uint8 0/1 with 1000 live slots"):
        DenseRetriever.load(root)
    np.save(file_of(root, "ann_live"), np.ones(1000, np.uint8))
    np.save(ivf, np.frombuffer(b"not a faiss index at all", np.uint8))
    reseal(root)
    with pytest.raises(KolmValueError, match=r"not a faiss index"):
        DenseRetriever.load(root)


def test_bad_arguments(data: Any) -> None:
    frame, docs, _ = data
    small = frame.iloc[:300], docs[:300]
    with pytest.raises(KolmValueError, match="takes no index parameters"):
        DenseRetriever(small[0], embeddings=small[1], ef_search=10)
    with pytest.raises(KolmValueError, match=r"index='hnsw' takes the parameters .*got 'nprobe'"):
        DenseRetriever(small[0], embeddings=small[1], index="hnsw", nprobe=4)
    with pytest.raises(ValueError, match="nprobe must be a positive integer"):
        DenseRetriever(small[0], embeddings=small[1], index="ivf", nprobe=0)
    with pytest.raises(KolmValueError, match=r"faiss cannot make 'Nonsense12'"):
        DenseRetriever(small[0], embeddings=small[1], index="Nonsense12")
    with pytest.raises(KolmValueError, match=r"pq_m=5 must divide the dimension 32"):
        DenseRetriever(small[0], embeddings=small[1], index="ivfpq", pq_m=5)


def test_a_composite_saves_and_loads_its_approximate_child(data: Any, tmp_path: Path) -> None:
    from kolm_search import BM25Retriever
    from kolm_search.retrievers.composite import CompositeRetriever

    frame, docs, queries = data
    small = frame.iloc[:1500].assign(content=[f"w{i % 13} w{i % 7}" for i in range(1500)])
    dense = DenseRetriever(small, embeddings=docs[:1500], index="ivf")
    dense.delete(["d3", "d4"])
    CompositeRetriever([BM25Retriever(small.drop(index=[3, 4])), dense]).save(tmp_path / "c")
    loaded = CompositeRetriever.load(tmp_path / "c")
    child = loaded.retrievers[1]
    assert isinstance(child, DenseRetriever) and child.index == "ivf" and child.ann.n_live == 1498
    for a, b in zip(child.search_vectors(queries, 20), dense.search_vectors(queries, 20), strict=True):
        np.testing.assert_array_equal(a, b)
