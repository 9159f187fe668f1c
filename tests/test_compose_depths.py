"""One first stage cut at several depths runs once (issue 27, item 4: equal prefixes run once).

``bm25 % 10`` and ``bm25 % 100`` in one experiment share ``bm25``: a retrieving stage that
declares itself prefix-stable for a batch (:meth:`Stage.prefix_stable`: BM25 and exact dense,
one text per query) is computed once, at the experiment's limit or deeper, and cut. Oracles:
each pipeline run on its own, outside any experiment; the declaration itself against a deeper
run cut by hand (hypothesis, corpora full of ties).

How deep each pipeline asks a stage is read before any runs (:meth:`Stage.asks`, walked by
:func:`~kolm_search.compose.depths.planned_depths`), so the stage runs once at the deepest limit
asked whatever the order of the pipelines; a stage declaring nothing is shared as it is met."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, DenseRetriever, Experiment, Fuse, as_stage
from kolm_search.adapters import MMRReranker
from kolm_search.compose import frame_ops
from kolm_search.compose.depths import planned_depths
from kolm_search.compose.queries import prepare_queries
from kolm_search.compose.runner import RunState, run_stage, sharing
from kolm_search.compose.stage import Composed
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.evaluation import grid_search
from tests.fakes import FingerprintedEmbedder, judged_cranfield


class Counted(BM25Retriever):
    """BM25 recording the limit of every batch it searches."""

    limits: ClassVar[list[int]] = []

    def retrieve_batch(self, batch: Any) -> Any:
        type(self).limits.append(batch.limit)
        return super().retrieve_batch(batch)


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    return judged_cranfield(20)


@pytest.fixture(scope="module")
def bm25(ds):  # type: ignore[no-untyped-def]
    return Counted(ds.corpus)


def _experiment(pipes: dict[str, Any], ds: Any, limit: int, cache: Path | None = None) -> Experiment:
    return Experiment(pipes, ds, ["ndcg@10"], limit=limit, progress=False, cache_dir=cache, drop_self_hits=False)


def _equal_own_runs(exp: Experiment, pipes: dict[str, Any], ds: Any, limit: int) -> None:
    queries = ds.judged_queries()
    for name, pipe in pipes.items():
        pd.testing.assert_frame_equal(exp.runs[name], pipe(queries, limit=limit))


@settings(max_examples=15, deadline=None)
@given(ks=st.lists(st.integers(1, 120), min_size=1, max_size=5), limit=st.integers(5, 40),
       plain=st.booleans(), seed=st.integers(0, 2**16))
def test_cutoffs_run_bm25_once_at_the_deepest_in_any_order(ds, bm25, ks: list[int], limit: int, plain: bool,
                                                           seed: int) -> None:  # type: ignore[no-untyped-def]
    """Cutoffs up to the limit and past it: the experiment reads how deep each pipeline asks BM25
    before running any (Stage.asks), so BM25 runs once whatever the order."""
    pipes: dict[str, Any] = {f"k{i}": bm25 % k >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5) if i % 2 else bm25 % k
                             for i, k in enumerate(ks)}
    if plain:
        pipes["bm25"] = bm25
    order = list(pipes)
    random.Random(seed).shuffle(order)
    pipes = {name: pipes[name] for name in order}
    Counted.limits = []
    exp = _experiment(pipes, ds, limit)
    exp.run_pipelines()
    assert Counted.limits == [max(limit, *ks)]  # once, as deep as the deepest cutoff (or the limit)
    _equal_own_runs(exp, pipes, ds, limit)


def test_a_deeper_cutoff_serves_the_shallower_ones_in_either_order(ds, bm25) -> None:  # type: ignore[no-untyped-def]
    pipes = {"k500": bm25 % 500, "k200": bm25 % 200, "k40": bm25 % 40, "k5": bm25 % 5}
    for ordered in (pipes, dict(reversed(pipes.items()))):
        Counted.limits = []
        exp = _experiment(ordered, ds, 20)
        exp.run_pipelines()
        assert Counted.limits == [500]
        _equal_own_runs(exp, ordered, ds, 20)


def test_a_fusion_asks_its_children_its_depth(ds, bm25) -> None:  # type: ignore[no-untyped-def]
    """``Fuse(..., depth=60)`` asks BM25 for 60 (CompositeRetriever.asks): run once, at 60, though
    ``bm25`` alone (asked 20) comes first."""
    pipes = {"bm25": bm25, "k30": bm25 % 30 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5),
             "fused": Fuse(bm25, DenseRetriever(ds.corpus, FingerprintedEmbedder()), depth=60)}
    Counted.limits = []
    exp = _experiment(pipes, ds, 20)
    exp.run_pipelines()
    assert Counted.limits == [60]
    _equal_own_runs(exp, pipes, ds, 20)


@pytest.mark.parametrize("make", [
    lambda b, r: b % 7,
    lambda b, r: b % 7 + b % 30,
    lambda b, r: 0.5 * (b % 45),
    lambda b, r: b % 12 >> r,
    lambda b, r: (b % 50) ** (b % 9),
    lambda b, r: b % 8 | b % 90,
    lambda b, r: (b % 100) % 10,
    lambda b, r: b >> r,
    lambda b, r: Fuse(b % 33, b, depth=70),
    lambda b, r: Fuse(b % 3, b % 4) % 2,
], ids=["cut", "sum", "scale", "then", "features", "union", "nested", "plain", "fuse-depth", "fuse-cut"])
def test_what_an_operator_declares_it_asks_is_what_it_asks(ds, bm25, make) -> None:  # type: ignore[no-untyped-def]
    """The plan (Stage.asks, walked by planned_depths) against the limits BM25 is searched at
    when the pipeline runs alone (no sharing: every ask searches)."""
    pipe = make(bm25, MMRReranker(FingerprintedEmbedder(), lambda_=0.5))
    queries = ds.judged_queries()
    Counted.limits = []
    pipe(queries, limit=20)
    assert planned_depths([pipe], prepare_queries(queries, limit=20)) == {bm25.fingerprint(): max(Counted.limits)}


class Twice(Composed):
    """A user's operator asking its stage twice the limit and declaring nothing (``asks`` None)."""

    names = ("stage",)

    def transform(self, batch: QueryBatch, candidates: Any) -> Any:
        deep = run_stage(self.operands[0], replace(batch, limit=2 * batch.limit), candidates)
        return frame_ops.cutoff(deep, batch.limit)


def test_a_stage_declaring_nothing_is_shared_as_it_is_met(ds, bm25) -> None:  # type: ignore[no-untyped-def]
    pipes = {"bm25": bm25, "twice": Twice(bm25)}
    Counted.limits = []
    exp = _experiment(pipes, ds, 20)
    exp.run_pipelines()
    assert Counted.limits == [20, 40]  # not planned: computed at the limit, then at the depth it asks
    _equal_own_runs(exp, pipes, ds, 20)
    Counted.limits = []
    exp = _experiment(dict(reversed(pipes.items())), ds, 20)
    exp.run_pipelines()
    assert Counted.limits == [40]  # the deeper run held serves the limit
    _equal_own_runs(exp, pipes, ds, 20)


def test_a_second_experiment_over_the_cache_runs_nothing(ds, bm25, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipes = {"k5": bm25 % 5 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.3), "k15": bm25 % 15, "bm25": bm25}
    first = _experiment(pipes, ds, 20, tmp_path)
    first.run_pipelines()
    Counted.limits = []
    again = _experiment(pipes, ds, 20, tmp_path)
    again.run_pipelines()
    assert Counted.limits == [] and not again.shared.computed
    _equal_own_runs(again, pipes, ds, 20)
    Counted.limits = []
    fresh = _experiment({"k12": bm25 % 12}, ds, 20, tmp_path)  # a cutoff not run before: BM25 at 20 read back
    fresh.run_pipelines()
    assert Counted.limits == [] and list(fresh.shared.computed) == [(bm25 % 12).fingerprint()]
    _equal_own_runs(fresh, {"k12": bm25 % 12}, ds, 20)


def test_expanded_queries_are_not_cut_from_a_deeper_run(ds, bm25) -> None:  # type: ignore[no-untyped-def]
    # RRF over each query's expanded texts is not prefix-stable: the top 5 of a fusion of top-5
    # lists is not the top 5 of a fusion of top-20 lists
    texts = list(ds.judged_queries()["query"])[:6]
    batch = QueryBatch(texts=texts, owner=np.array([0, 0, 1, 1, 2, 2]), n_queries=3, limit=20, filters=[{}] * 3,
                       mode="lexical", table=bm25.table)
    assert not bm25.prefix_stable(batch) and bm25.prefix_stable(replace(batch, texts=texts[:3], owner=np.arange(3)))
    Counted.limits = []
    with sharing(RunState(depth=20)):
        shared = run_stage(bm25 % 5, batch, None)
    assert Counted.limits == [5]
    alone = run_stage(bm25 % 5, batch, None)
    for name in ("query", "doc", "score", "rank"):
        np.testing.assert_array_equal(getattr(shared, name), getattr(alone, name))


def test_stages_that_do_not_declare_it_are_asked_their_own_depth(ds) -> None:  # type: ignore[no-untyped-def]
    asked: list[int] = []

    class Mine:
        def retrieve(self, context: Any) -> list[Any]:
            asked.append(context.plan.target_limit)
            return [doc for doc in Counted(ds.corpus.iloc[:40]).retrieve(context)]

    mine = as_stage(Mine(), table=ds.corpus.iloc[:40])
    one = QueryBatch(texts=["a"], owner=np.zeros(1, np.int64), n_queries=1, limit=5, filters=[{}])
    assert not mine.prefix_stable(one) and not (Counted(ds.corpus) % 5).prefix_stable(one)  # (operators do not)
    exp = _experiment({"a": mine % 3, "b": mine % 7}, ds, 10)
    exp.run_pipelines()
    assert sorted(set(asked)) == [3, 7]


def test_exact_dense_shares_and_its_runs_equal_their_own(ds) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []

    class CountedDense(DenseRetriever):
        def retrieve_batch(self, batch: Any) -> Any:
            calls.append(batch.limit)
            return super().retrieve_batch(batch)

    dense = CountedDense(ds.corpus, FingerprintedEmbedder())
    pipes = {"d3": dense % 3, "d10": dense % 10, "d": dense}
    exp = _experiment(pipes, ds, 12)
    exp.run_pipelines()
    assert calls == [12]
    _equal_own_runs(exp, pipes, ds, 12)


def test_grid_search_over_the_cutoff_runs_bm25_once(ds) -> None:  # type: ignore[no-untyped-def]
    Counted.limits = []
    pipe = Counted(ds.corpus) % 10 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)
    found = grid_search(pipe, {"left__k": [3, 10, 30, 5]}, ds.judged_queries(), ds.qrels, "ndcg@10", limit=30)
    assert Counted.limits == [30]
    for (name, run), k in zip(found.runs.items(), [3, 10, 30, 5], strict=True):
        oracle = BM25Retriever(ds.corpus) % k >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)
        pd.testing.assert_frame_equal(run, oracle(ds.judged_queries(), limit=30), obj=name)


def test_grid_search_over_cutoffs_past_the_limit_shares_what_it_already_holds(ds) -> None:  # type: ignore[no-untyped-def]
    """grid_search plans no depths (a plan would set every point's parameters twice, a BM25
    re-index per point when they reach it): a cutoff past the limit runs BM25 at it, and the
    shallower ones after it are cut from that run."""
    Counted.limits = []
    pipe = Counted(ds.corpus) % 10 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)
    ks = [3, 60, 10, 45, 90]
    found = grid_search(pipe, {"left__k": ks}, ds.judged_queries(), ds.qrels, "ndcg@10", limit=30)
    assert Counted.limits == [30, 60, 90]
    for (name, run), k in zip(found.runs.items(), ks, strict=True):
        oracle = BM25Retriever(ds.corpus) % k >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)
        pd.testing.assert_frame_equal(run, oracle(ds.judged_queries(), limit=30), obj=name)


@settings(max_examples=40, deadline=None)
@given(n_docs=st.integers(1, 60), vocab=st.integers(1, 4), n_queries=st.integers(1, 4), small=st.integers(1, 30),
       extra=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_bm25_and_exact_dense_keep_their_declaration(n_docs: int, vocab: int, n_queries: int, small: int, extra: int,
                                                     seed: int) -> None:
    """The declaration the sharing rests on: the top ``small`` of a batch are the first of each
    query's top ``small + extra``, on corpora of a few words (so, many equal scores)."""
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta"][:vocab]
    corpus = pd.DataFrame({"id": [f"d{i}" for i in range(n_docs)],
                           "content": [" ".join(rng.choice(words, rng.integers(1, 4))) for _ in range(n_docs)]})
    texts = [" ".join(rng.choice(words, rng.integers(1, 3))) for _ in range(n_queries)]
    deep = QueryBatch(texts=texts, owner=np.arange(n_queries), n_queries=n_queries, limit=small + extra,
                      filters=[{}] * n_queries, mode="hybrid")
    for stage in (BM25Retriever(corpus), DenseRetriever(corpus, FingerprintedEmbedder())):
        assert stage.prefix_stable(deep)
        wide = stage.transform(deep, None)
        narrow = stage.transform(replace(deep, limit=small), None)
        cut = frame_ops.cutoff(wide, small)
        for name in ("query", "doc", "score", "rank"):
            np.testing.assert_array_equal(getattr(narrow, name), getattr(cut, name), err_msg=f"{stage!r} {name}")


def test_a_dense_index_declared_approximate_is_not_cut_before_its_index_is_built(ds) -> None:  # type: ignore[no-untyped-def]
    """An ANN dense retriever made empty has no index until its deferred documents merge (in
    ``transform``, after the runner asked ``prefix_stable``): the declaration follows the index
    asked for, not the one built, or the runner cuts an HNSW search made for 300 to 5."""
    pytest.importorskip("faiss")

    def made() -> DenseRetriever:
        dense = DenseRetriever(ds.corpus.iloc[:0], FingerprintedEmbedder(), index="hnsw", m=4, ef_search=1)
        dense.add(ds.corpus, defer=True)
        return dense

    texts = list(ds.queries["query"])
    batch = QueryBatch(texts=texts, owner=np.arange(len(texts)), n_queries=len(texts), limit=5,
                       filters=[{}] * len(texts))
    dense = made()
    assert dense.ann is None and not dense.prefix_stable(batch)
    with sharing(RunState(depth=300)):
        shared = run_stage(dense % 5, batch, None)
    alone = run_stage(made() % 5, batch, None)
    for name in ("query", "doc", "score", "rank"):
        np.testing.assert_array_equal(getattr(shared, name), getattr(alone, name), err_msg=name)
