"""Pruning through BM25Retriever: ``pruning="auto"`` returns what ``"none"`` (the exhaustive kernel)
returns on Cranfield for every query, BM25 variant, k, filter and weighted (feedback) query; term
and block maxima follow merges and saves, a damaged ``term_max`` or ``block_max`` file is refused
on load by full and quick loads alike, and indexes saved before them (formats 3-5) load with them
computed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever
from kolm_search._kernels import load
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.selection import Selection, Selections
from kolm_search.errors import KolmError, KolmValueError
from kolm_search.retrievers import bounds
from kolm_search.retrievers.feedback import FeedbackRetriever
from tests.reliability.indexes import file_of, load_and_read, reseal

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")


@pytest.fixture
def prune_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """``pruning="auto"`` sends every query the pruned kernel can take to it (any k, any length)."""
    monkeypatch.setattr(bounds, "PRUNE_MIN_POSTINGS_PER_K", 0)


def same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.fixture(scope="module")
def cranfield_indexes(cranfield: dict[str, pd.DataFrame]) -> dict[str, BM25Retriever]:
    return {m: BM25Retriever(cranfield["corpus"], method=m) for m in METHODS}  # type: ignore[arg-type]


@pytest.mark.parametrize("method", METHODS)
def test_cranfield_every_query_identical(cranfield_indexes: dict[str, BM25Retriever],
                                         cranfield: dict[str, pd.DataFrame], method: str, prune_all: None) -> None:
    ret = cranfield_indexes[method]
    texts = list(cranfield["queries"]["query"])
    q_ptr, q_ids = ret.encode(texts)
    n = len(ret.table)
    rng = np.random.default_rng(0)
    sel = Selections.build(rng.integers(-1, 2, len(texts)), [Selection.of_mask(rng.random(n) < 0.5),
                                                            Selection.of_rows(np.sort(rng.choice(n, 200, replace=False)), n)])
    kernel = load("pruned")
    for k in (1, 10, 100, 1000):
        exhaustive = ret.score_encoded(q_ptr, q_ids, k, pruning="none")
        same(ret.score_encoded(q_ptr, q_ids, k), exhaustive)
        every = kernel.pruned_topk(q_ptr, q_ids, np.ones(len(q_ids), np.float32), ret.t_ptr, ret.t_docs, ret.t_w,
                                   ret.t_max, ret.b_max, ret.b_last, *_offsets(ret, q_ptr, q_ids),
                                   *Selections.none(len(texts)).arrays(), n, k, bail=np.inf, lookup=0.0)
        same(every, exhaustive)
        every = kernel.pruned_topk(q_ptr, q_ids, np.ones(len(q_ids), np.float32), ret.t_ptr, ret.t_docs, ret.t_w,
                                   ret.t_max, ret.b_max, ret.b_last, *_offsets(ret, q_ptr, q_ids),
                                   *Selections.none(len(texts)).arrays(), n, k, t_min=ret.t_min)  # some given back
        same(every, exhaustive)
        same(ret.score_encoded(q_ptr, q_ids, k, sel), ret.score_encoded(q_ptr, q_ids, k, sel, pruning="none"))


def _offsets(ret: BM25Retriever, q_ptr: np.ndarray, q_ids: np.ndarray) -> tuple[np.ndarray]:
    from kolm_search.retrievers.bm25_weights import reduce_offsets

    return (np.ascontiguousarray(reduce_offsets(ret.nonocc[q_ids], q_ptr), np.float32),)


def test_weighted_and_feedback_queries_identical(cranfield_indexes: dict[str, BM25Retriever],
                                                 cranfield: dict[str, pd.DataFrame], prune_all: None) -> None:
    texts = list(cranfield["queries"]["query"])[:60]
    for method in ("lucene", "bm25+"):
        ret = cranfield_indexes[method]
        rng = np.random.default_rng(1)
        q_ptr, q_ids = ret.encode(texts)
        weights = rng.choice([0.25, 0.5, 1.0, 3.0], len(q_ids)).astype(np.float32)
        for k in (5, 100):
            same(ret.score_weighted(q_ptr, q_ids, weights, k), ret.score_weighted(q_ptr, q_ids, weights, k, pruning="none"))
        batch = QueryBatch(texts=texts, owner=np.arange(len(texts)), n_queries=len(texts), limit=50,
                           filters=[{}] * len(texts), mode="fulltext")
        exhaustive = copy.copy(ret)  # the same arrays, the exhaustive kernel
        exhaustive.pruning = "none"
        for model in ("rm3", "bo1"):
            a = FeedbackRetriever(ret, model).retrieve_batch(batch)  # type: ignore[arg-type]
            b = FeedbackRetriever(exhaustive, model).retrieve_batch(batch)  # type: ignore[arg-type]
            assert a.doc.tobytes() == b.doc.tobytes() and a.score.tobytes() == b.score.tobytes()


def test_auto_rule_prunes_long_postings_for_k() -> None:
    t_ptr = np.array([0, 5000, 5100, 5110], np.int64)
    q_ptr = np.array([0, 2, 4, 5, 7], np.int64)  # [rare, common], [rare, rare], [common], [common, rare] weighted -1
    q_ids = np.array([1, 0, 1, 2, 0, 0, 1], np.int64)
    w = np.array([1, 1, 1, 1, 1, 1, -1], np.float32)
    sel = Selections.none(4)
    args = (q_ptr, q_ids, w, t_ptr, np.zeros(4, np.float32), sel.ids, sel.ptr, sel.mask_of)
    assert bounds.prune_queries(*args, 10).tolist() == [True, False, True, False]  # 110 < 50 * 10 postings; a weight < 0
    assert bounds.prune_queries(*args, 101).tolist() == [True, False, False, False]  # 5,000 < 50 * 101
    assert not bounds.prune_queries(*args, 1000).any()


def test_pruning_is_checked() -> None:
    with pytest.raises(KolmError, match="pruning must be one of"):
        BM25Retriever([{"id": "a", "content": "x"}], pruning="always")  # type: ignore[arg-type]
    ret = BM25Retriever([{"id": "a", "content": "x y"}, {"id": "b", "content": "y"}])
    with pytest.raises(KolmError, match="pruning must be one of"):
        ret.score_texts(["y"], 2, pruning="fast")  # type: ignore[arg-type]
    same(ret.score_texts(["y"], 2, pruning="none"), ret.score_texts(["y"], 2))


def _docs(n: int, start: int = 0) -> list[dict[str, Any]]:
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta"]
    return [{"id": f"d{i}", "content": " ".join(words[(i * j) % 7] for j in range(1, 2 + i % 6))}
            for i in range(start, start + n)]


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_merges_keep_the_bounds_of_a_rebuild(method: str, prune_all: None, tmp_path: Path) -> None:
    ret = BM25Retriever(_docs(40), method=method)  # type: ignore[arg-type]
    ret.add(_docs(15, start=40))
    ret.delete([f"d{i}" for i in range(0, 55, 4)])
    live = [d for d in _docs(55) if int(d["id"][1:]) % 4]
    ref = BM25Retriever(live, method=method)  # type: ignore[arg-type]
    ret.merge()
    assert dict(zip(ret.vocab, ret.t_max.tolist(), strict=True)) == dict(zip(ref.vocab, ref.t_max.tolist(), strict=True))
    for got, want in zip((ret.t_min, ret.t_max, ret.b_max, ret.b_last),
                         load("blocks").posting_bounds_numpy(ret.t_ptr, ret.t_docs, ret.t_w), strict=True):
        np.testing.assert_array_equal(got, want)
    queries = ["alpha beta", "gamma", "eta zeta alpha", "delta delta beta"]
    for k in (1, 3, 50):
        same(ret.score_texts(queries, k), ref.score_texts(queries, k))
        same(ret.score_texts(queries, k), ret.score_texts(queries, k, pruning="none"))
    ret.save(tmp_path / "i")
    loaded = BM25Retriever.load(tmp_path / "i", pruning="none")
    assert loaded.pruning == "none"
    np.testing.assert_array_equal(loaded.t_max, ret.t_max)
    np.testing.assert_array_equal(loaded.b_max, ret.b_max)
    same(loaded.score_texts(queries, 3, pruning="auto"), ref.score_texts(queries, 3))


@pytest.mark.parametrize("verify", ["full", "quick"])
@pytest.mark.parametrize("name", ["term_max", "block_max"])
def test_damaged_maxima_are_refused(tmp_path: Path, name: str, verify: str) -> None:
    BM25Retriever(_docs(30) + [{"id": f"x{i}", "content": "alpha"} for i in range(200)]).save(tmp_path / "i")
    path = file_of(tmp_path / "i", name)
    good = np.load(path)
    unit = name.split("_")[0]
    where = {"term": ("term 2", "term 0"), "block": ("block 2 of term 0", "block 0 of term 0")}[unit]
    for damage in ("low", "nan", "short"):
        bad = good.copy()
        if damage == "low":
            bad[2] = np.nextafter(bad[2], np.float32(0))  # one ulp below: results could drop silently
        elif damage == "nan":
            bad[0] = np.nan
        else:
            bad = bad[:-1]
        np.save(path, bad)
        reseal(tmp_path / "i")  # the digests match: the check of what the file means must refuse it
        with pytest.raises(KolmValueError, match=rf"{path.name}: ({where[0]} records maximum|{where[1]} records|"
                                                 rf"has \d+ {unit} maxima)"):
            load_and_read(tmp_path / "i", verify)  # quickly: sizes at load, values at a term's first search
    np.save(path, good)
    reseal(tmp_path / "i")
    loaded = BM25Retriever.load(tmp_path / "i", verify=verify)
    assert np.array_equal(loaded.t_max if unit == "term" else loaded.b_max, good)


@pytest.mark.parametrize("verify", ["full", "quick"])
@pytest.mark.parametrize("version", [3, 4, 5])
def test_an_index_saved_before_the_maxima_gets_them(tmp_path: Path, version: int, verify: str) -> None:
    ret = BM25Retriever(_docs(30) + [{"id": f"x{i}", "content": "alpha beta"} for i in range(150)], method="bm25l")
    ret.save(tmp_path / "i")
    d = tmp_path / "i"
    body = json.loads((d / "manifest.json").read_text())
    for name in ("term_max", "block_max")[min(version - 3, 1):]:  # what format `version` did not save (4: term maxima, 6: block)
        file_of(d, name).unlink()
        del body["files"][name]
    body["version"] = version
    (d / "manifest.json").write_text(json.dumps(body))
    old = BM25Retriever.load(d, verify=verify)
    for name in ("t_min", "t_max", "b_max", "b_last"):
        np.testing.assert_array_equal(getattr(old, name), getattr(ret, name))
    same(old.score_texts(["alpha beta", "eta"], 5), ret.score_texts(["alpha beta", "eta"], 5, pruning="none"))
    body["files"]["block_max"] = {"name": "x", "bytes": 0, "sha256": "0" * 64}  # a file the format did not have
    (d / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(KolmValueError, match="block_max"):
        BM25Retriever.load(d)
