"""Probe 9 (hostile user of the newest features: exact BM25 pruning, format-6 loads, stage
experiments with ``cache_dir``): a reproducer for each bug found. What held is in the report."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, Experiment, Fuse, fuse
from kolm_search.engine.selection import Selection, Selections
from kolm_search.errors import KolmError
from kolm_search.evaluation import grid_search
from kolm_search.io import load_dataset
from kolm_search.retrievers import bounds


def _docs(n: int = 300) -> list[dict[str, Any]]:
    return [{"id": f"d{i}", "content": "alpha beta" if i % 3 else "alpha"} for i in range(n)]


@pytest.mark.parametrize("pruning", ["auto", "none"])
@pytest.mark.parametrize("offsets", [[1.0], [1.0, 2.0, 3.0, 4.0], [[1.0], [2.0]], ["x", "y"]])
def test_offsets_of_the_wrong_shape_are_refused(pruning: str, offsets: Any) -> None:
    """``score_texts(offsets=...)`` takes one offset per query: any other shape must be a
    KolmError naming ``offsets`` before a kernel reads it. Before the fix, ``pruning="none"``
    with fewer offsets than queries read past the array in the Numba kernel (a silent wrong
    score, or a crash) and other shapes raised a raw IndexError/ValueError."""
    ret = BM25Retriever(_docs(), method="bm25l")
    with pytest.raises(KolmError, match="offsets"):
        ret.score_texts(["alpha", "beta"], 2, offsets=offsets, pruning=pruning)  # type: ignore[arg-type]


def test_offsets_of_the_right_shape_still_score() -> None:
    ret = BM25Retriever(_docs(), method="bm25l")
    got = ret.score_texts(["alpha", "beta"], 2, offsets=[1.0, 2.0], pruning="none")
    base = ret.score_texts(["alpha", "beta"], 2, offsets=[0.0, 0.0], pruning="none")
    np.testing.assert_array_equal(got[0], base[0])
    np.testing.assert_allclose(got[1], base[1] + np.array([[1.0], [2.0]], np.float32), rtol=1e-6)


@pytest.mark.parametrize("kind", ["runs", "stages"])
def test_a_directory_in_place_of_a_cache_file(tmp_path: Path, kind: str) -> None:
    dataset = load_dataset("cranfield")
    keep = set(dataset.judged_queries()["qid"].iloc[:3])
    dataset.queries = dataset.queries[dataset.queries["qid"].isin(keep)].reset_index(drop=True)
    dataset.qrels = dataset.qrels[dataset.qrels["qid"].isin(keep)].reset_index(drop=True)
    pipes = {"bm": BM25Retriever(dataset.corpus) % 5}
    first = Experiment(pipes, dataset, ["ndcg@10"], progress=False, cache_dir=tmp_path)
    first.run_pipelines()
    want = first.runs["bm"].copy()
    files = sorted((tmp_path / kind).iterdir())
    assert files
    if kind == "stages":
        for f in (tmp_path / "runs").iterdir():  # so the stage files are read
            f.unlink()
    for f in files:
        f.unlink()
        f.mkdir()
    again = Experiment(pipes, dataset, ["ndcg@10"], progress=False, cache_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            again.run_pipelines()
        except KolmError as exc:  # acceptable: a clear error naming the file
            assert any(f.name in str(exc) for f in files)
            return
    pd.testing.assert_frame_equal(again.runs["bm"], want)


@pytest.mark.parametrize("pruning", ["auto", "none"])
@pytest.mark.parametrize("bad", ["ptr_past_end", "ptr_decreasing", "ptr_2d", "weights_short", "weights_long"])
def test_score_encoded_checks_its_csr_arrays(pruning: str, bad: str) -> None:
    ret = BM25Retriever(_docs(), method="bm25l")
    q_ptr, q_ids = np.array([0, 2], np.int64), np.array([0, 1], np.int64)
    weights = None
    if bad == "ptr_past_end":
        q_ptr = np.array([0, 50], np.int64)
    elif bad == "ptr_decreasing":
        q_ptr = np.array([0, 2, 1, 2], np.int64)
    elif bad == "ptr_2d":
        q_ptr = np.array([[0, 2]], np.int64)
    elif bad == "weights_short":
        weights = np.ones(1, np.float32)
    else:
        weights = np.ones(3, np.float32)
    with pytest.raises(KolmError, match="q_ptr|weights"):
        ret.score_encoded(q_ptr, q_ids, 3, weights=weights, pruning=pruning)  # type: ignore[arg-type]


def _small_dataset(n_queries: int = 3) -> Any:
    dataset = load_dataset("cranfield")
    keep = set(dataset.judged_queries()["qid"].iloc[:n_queries])
    dataset.queries = dataset.queries[dataset.queries["qid"].isin(keep)].reset_index(drop=True)
    dataset.qrels = dataset.qrels[dataset.qrels["qid"].isin(keep)].reset_index(drop=True)
    return dataset


@pytest.mark.parametrize("under", [False, True])
def test_cache_dir_that_is_a_file_is_refused_by_name(tmp_path: Path, under: bool) -> None:
    dataset = _small_dataset()
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cache_dir = blocker / "sub" if under else blocker
    pipes = {"bm": BM25Retriever(dataset.corpus) % 5}
    with pytest.raises(KolmError, match="blocker"):
        Experiment(pipes, dataset, ["ndcg@10"], progress=False, cache_dir=cache_dir).run_pipelines()
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_cache_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blank: str) -> None:
    dataset = _small_dataset()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KolmError, match="cache_dir=.* names no folder"):
        Experiment({"bm": BM25Retriever(dataset.corpus) % 5}, dataset, ["ndcg@10"], progress=False, cache_dir=blank)
    with pytest.raises(KolmError, match="cache_dir=.* names no folder"):
        grid_search(BM25Retriever(dataset.corpus) % 5, {"stage__k1": [1.2]}, dataset.judged_queries(), dataset.qrels,
                    "ndcg@10", cache_dir=blank)
    assert not list(tmp_path.iterdir())


def test_a_fuse_of_cut_stages_inside_a_fuse_searches() -> None:
    dataset = _small_dataset(5)
    bm, bl = BM25Retriever(dataset.corpus), BM25Retriever(dataset.corpus, method="bm25l")
    queries = dataset.judged_queries()
    inner = Fuse(bm % 5, bl % 5)
    got = Fuse(inner, bm % 3)(queries)
    want = fuse([inner(queries), (bm % 3)(queries)], method="rrf", k=60)  # the same fusion of the two lists
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False,
                                  check_categorical=False)


_WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), method=st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]),
       n_docs=st.integers(1, 150), every=st.booleans())
def test_auto_equals_none_through_updates(data: st.DataObject, method: str, n_docs: int, every: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``pruning="auto"`` returns ``"none"``'s top-k bit for bit on corpora of heavy ties (identical
    documents), queries with repeated and unknown terms or none, every k, row and mask filters,
    after add/delete; and the updated index returns what a rebuild of its documents returns."""
    if every:
        monkeypatch.setattr(bounds, "PRUNE_MIN_POSTINGS_PER_K", 0)
    texts = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(" ".join)
    contents = data.draw(st.lists(st.one_of(st.just("alpha beta"), texts), min_size=n_docs, max_size=n_docs))
    docs = [{"id": f"d{i}", "content": c} for i, c in enumerate(contents)]
    ret = BM25Retriever(docs, method=method, n_threads=1)  # type: ignore[arg-type]
    extra = data.draw(st.lists(texts, max_size=20))
    ret.add([{"id": f"x{i}", "content": c} for i, c in enumerate(extra)])
    gone = data.draw(st.sets(st.integers(0, n_docs - 1), max_size=n_docs - 1))
    if gone:
        ret.delete([f"d{i}" for i in sorted(gone)])
    live = [d for i, d in enumerate(docs) if i not in gone] + [{"id": f"x{i}", "content": c} for i, c in enumerate(extra)]
    rebuilt = BM25Retriever(live, method=method, n_threads=1)  # type: ignore[arg-type]
    queries = data.draw(st.lists(st.one_of(texts, st.just(""), st.just("unknown words"), st.just("alpha " * 70)),
                                 min_size=1, max_size=6))
    n = len(live)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    chosen = [Selection.of_mask(rng.random(n) < 0.05), Selection(n, rows=np.sort(rng.choice(n, min(n, 2), replace=False)))]
    sels = Selections.build(rng.integers(-1, 2, len(queries)), chosen)
    for k in sorted({1, 2, n, n + 5, 10**9}):
        for sel in (None, sels):
            want = ret.score_texts(queries, k, sel, pruning="none")
            for got in (ret.score_texts(queries, k, sel, pruning="auto"), rebuilt.score_texts(queries, k, sel)):
                for a, b in zip(got, want, strict=True):
                    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_a_fractional_experiment_limit_is_refused() -> None:
    dataset = _small_dataset()
    with pytest.raises(KolmError, match="limit"):
        Experiment({"bm": BM25Retriever(dataset.corpus) % 5}, dataset, ["ndcg@10"], limit=2.7,  # type: ignore[arg-type]
                   progress=False).run_pipelines()
