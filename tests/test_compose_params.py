"""Parameters and grids (issue 27, item 5): scikit-learn's ``get_params``/``set_params`` with nested
names through operators (oracle: a stage built with those parameters), and ``grid_search``
(oracle: ``evaluate`` of each point's pipeline built from scratch; ``cross_validate``)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from kolm_search import (
    BM25Retriever,
    DenseRetriever,
    FeedbackRetriever,
    Fuse,
    KolmTypeError,
    KolmValueError,
    evaluate,
)
from kolm_search.adapters import MMRReranker
from kolm_search.evaluation import cross_validate, grid_search
from kolm_search.io import load_dataset
from tests.fakes import BatchHashEmbedder, FingerprintedEmbedder


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    data = load_dataset("cranfield")
    queries = data.judged_queries().iloc[:30].reset_index(drop=True)
    qrels = data.qrels[data.qrels["qid"].isin(set(queries["qid"]))]
    return data.corpus, queries, qrels


def test_get_params_nested_through_operators(ds) -> None:  # type: ignore[no-untyped-def]
    corpus = ds[0]
    emb = FingerprintedEmbedder()
    bm25 = BM25Retriever(corpus.iloc[:200])
    pipe = Fuse(bm25 % 50, DenseRetriever(corpus.iloc[:200], emb), k=30) >> MMRReranker(emb, lambda_=0.4)
    params = pipe.get_params()
    assert params["right__lambda_"] == 0.4
    assert params["left__k"] == 30
    assert params["left__s0__k"] == 50 and params["left__s0__stage__k1"] == 1.5
    assert params["left__s1__metric"] == "cosine"
    assert set(pipe.get_params(deep=False)) == {"left", "right"}
    with pytest.raises(KolmValueError, match="no parameter 'nope'"):
        pipe.set_params(nope=1)
    with pytest.raises(KolmValueError, match="lambda_"):
        pipe.set_params(right__lambda_=2.0)  # checked as the constructor checks it
    assert pipe.get_params()["right__lambda_"] == 0.4
    with pytest.raises(KolmValueError, match="change the document vectors"):
        pipe.set_params(left__s1__metric="ip")


def test_set_params_equals_a_stage_built_with_them(ds) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, _ = ds
    pipe = FeedbackRetriever(BM25Retriever(corpus), "rm3") % 30
    pipe.set_params(k=20, stage__fb_terms=5, stage__bm25__k1=0.9, stage__bm25__b=0.4)
    fresh = FeedbackRetriever(BM25Retriever(corpus, k1=0.9, b=0.4), "rm3", fb_terms=5) % 20
    pd.testing.assert_frame_equal(pipe(queries, limit=20), fresh(queries, limit=20))
    assert pipe.fingerprint() == fresh.fingerprint()


def _counted(calls: list[int]) -> Any:
    class Counted(BM25Retriever):
        def retrieve_batch(self, batch: Any) -> Any:
            calls.append(1)
            return super().retrieve_batch(batch)
    return Counted


def test_grid_search_scores_every_point_and_shares_the_first_stage(ds) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, qrels = ds
    calls: list[int] = []
    emb = FingerprintedEmbedder()
    pipe = _counted(calls)(corpus) % 30 >> MMRReranker(emb, lambda_=0.5)
    grid = {"right__lambda_": [0.2, 1.0], "right__top_n": [None, 5]}
    found = grid_search(pipe, grid, queries, qrels, "ndcg@10", limit=30)
    assert len(calls) == 1  # four points, one BM25 run
    assert pipe.get_params()["right__lambda_"] == 0.5  # restored
    for _, row in found.table.iterrows():
        top_n = None if pd.isna(row["right__top_n"]) else int(row["right__top_n"])
        oracle = BM25Retriever(corpus) % 30 >> MMRReranker(emb, lambda_=row["right__lambda_"], top_n=top_n)
        expect = evaluate(oracle(queries, limit=30), qrels, ["ndcg@10"])["ndcg@10"]
        assert row["ndcg@10"] == pytest.approx(expect, abs=1e-12)
    best = found.table["ndcg@10"].idxmax()
    assert found.best_score == found.table["ndcg@10"][best]
    assert found.best_params["right__lambda_"] == found.table["right__lambda_"][best]


def test_grid_search_runs_each_point_of_a_pipeline_without_a_fingerprint(ds) -> None:  # type: ignore[no-untyped-def]
    """A pipeline holding a stage without a fingerprint (an embedder that declares none) is keyed
    by its objects' identity, which ``set_params`` keeps: each point's own parameters still
    give its run (oracle: a pipeline built with them), not the run of the point before it."""
    corpus, queries, qrels = ds
    emb = BatchHashEmbedder()
    pipe = BM25Retriever(corpus) % 30 >> MMRReranker(emb, lambda_=0.5)
    grid = {"left__k": [5, 20], "right__lambda_": [0.2, 1.0]}
    found = grid_search(pipe, grid, queries, qrels, "ndcg@10", limit=30)
    for i, (_, row) in enumerate(found.table.iterrows()):
        oracle = BM25Retriever(corpus) % int(row["left__k"]) >> MMRReranker(emb, lambda_=row["right__lambda_"])
        pd.testing.assert_frame_equal(found.runs[f"p{i}"], oracle(queries, limit=30))
        expect = evaluate(oracle(queries, limit=30), qrels, ["ndcg@10"])["ndcg@10"]
        assert row["ndcg@10"] == pytest.approx(expect, abs=1e-12)


def test_grid_search_with_folds_reports_the_held_out_score(ds, tmp_path) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, qrels = ds
    pipe = BM25Retriever(corpus)
    found = grid_search(pipe, {"k1": [0.6, 1.2], "b": [0.3, 0.75]}, queries, qrels, "ndcg@10", folds=4, limit=50,
                        cache_dir=tmp_path)
    oracle = cross_validate(found.runs, qrels, metric="ndcg@10", folds=4, seed=0)
    assert found.held_out_score == pytest.approx(oracle.mean)
    assert found.cross_validation is not None and len(found.cross_validation.folds) == 4
    assert pipe.get_params()["k1"] == 1.5
    again = grid_search(pipe, {"k1": [0.6, 1.2], "b": [0.3, 0.75]}, queries, qrels, "ndcg@10", limit=50,
                        cache_dir=tmp_path)
    assert not again.shared.computed  # every point read back from the cache
    pd.testing.assert_frame_equal(again.table, found.table)
    with pytest.raises(KolmValueError, match="does not have"):
        grid_search(pipe, {"k9": [1]}, queries, qrels)


def test_reranker_params() -> None:
    from kolm_search.adapters import FusionReranker

    fusion = FusionReranker(["original"], [1.0])
    assert fusion.set_params(weights=[2.0]).get_params()["weights"] == [2.0]
    with pytest.raises(KolmValueError, match="one per scorer"):
        fusion.set_params(weights=[1.0, 2.0])
    mmr = MMRReranker(FingerprintedEmbedder(), lambda_=0.3, top_n=4)
    assert mmr.set_params(top_n=None).get_params() == {"embedder": mmr.embedder, "lambda_": 0.3, "top_n": None}


def test_set_params_is_all_or_nothing(ds) -> None:  # type: ignore[no-untyped-def]
    """A refused value leaves every parameter of the call as it was (the fingerprint too), at one
    level (``k`` and ``stage`` of a cutoff) and across nested stages."""
    corpus = ds[0].iloc[:200]
    emb = FingerprintedEmbedder()
    cut = BM25Retriever(corpus) % 50
    with pytest.raises(KolmTypeError, match="same kind"):
        cut.set_params(k=7, stage=MMRReranker(emb))
    assert cut.get_params()["k"] == 50
    pipe = Fuse(BM25Retriever(corpus) % 50, DenseRetriever(corpus, emb), k=30) >> MMRReranker(emb, lambda_=0.4)
    before, fp = pipe.get_params(), pipe.fingerprint()
    for bad in ({"right__lambda_": 0.9, "left__s0__k": 0}, {"left__k": 10, "left__s0__stage__k1": 0.9, "left__s0__k": 0},
                {"left__s0__stage__k1": 0.9, "right__top_n": -1}):
        with pytest.raises(KolmValueError):
            pipe.set_params(**bad)
        after = pipe.get_params()
        assert {k: after[k] for k in bad} == {k: before[k] for k in bad}
        assert pipe.fingerprint() == fp


def test_set_params_of_its_own_values_is_a_no_op(ds) -> None:  # type: ignore[no-untyped-def]
    """scikit-learn's round trip ``set_params(**get_params())`` leaves a stage as it was, also one
    holding a dense index whose vector parameters cannot change."""
    corpus = ds[0].iloc[:200]
    emb = FingerprintedEmbedder()
    pipe = Fuse(BM25Retriever(corpus) % 50, DenseRetriever(corpus, emb), k=30) >> MMRReranker(emb, lambda_=0.4)
    fp = pipe.fingerprint()
    for params in (pipe.get_params(deep=False), pipe.get_params()):
        assert pipe.set_params(**params).fingerprint() == fp
    with pytest.raises(KolmValueError, match="change the document vectors"):
        pipe.set_params(left__s1__metric="ip", left__s1__index="flat")


def test_grid_search_scores_a_point_zero_on_the_queries_it_does_not_answer(ds) -> None:  # type: ignore[no-untyped-def]
    """A point that answers fewer queries (an intersection of two small cutoffs) is not scored on
    those alone (its mean would beat a better point's): like ``compare`` and ``cross_validate``,
    every point is scored over the judged queries any point answers, a missing one scoring 0.
    Oracle: pytrec_eval per query of each point's run, 0 where it has none."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    corpus, queries, qrels = ds
    pipe = (BM25Retriever(corpus) % 3) & (BM25Retriever(corpus, k1=0.2, b=0.0) % 3)
    found = grid_search(pipe, {"left__k": [1, 2], "right__k": [1, 3]}, queries, qrels, "ndcg@10", folds=3)
    judged: dict[str, dict[str, int]] = {}
    for qid, doc, rel in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False):
        judged.setdefault(str(qid), {})[str(doc)] = int(rel)
    per_point: dict[str, dict[str, float]] = {}
    for name, run in found.runs.items():
        scored: dict[str, dict[str, float]] = {}
        for qid, doc, score in run[["qid", "doc_id", "score"]].itertuples(index=False):
            scored.setdefault(str(qid), {})[str(doc)] = float(score)
        values = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut"}).evaluate(scored)
        per_point[name] = {q: v["ndcg_cut_10"] for q, v in values.items()}
    answered = sorted(set().union(*per_point.values()) & set(judged))
    assert min(len(p) for p in per_point.values()) < len(answered)  # some point misses queries
    means = {name: sum(p.get(q, 0.0) for q in answered) / len(answered) for name, p in per_point.items()}
    for _, row in found.table.iterrows():
        assert row["ndcg@10"] == pytest.approx(means[row["point"]], abs=1e-12)
    best = max(means, key=lambda n: (means[n], -int(n[1:])))
    assert found.best_score == pytest.approx(means[best], abs=1e-12)
    assert found.best_params == found.table.set_index("point").loc[best, ["left__k", "right__k"]].to_dict()
    assert found.cross_validation is not None
    assert found.cross_validation.scores.mean().to_dict() == pytest.approx(found.table.set_index("point")["ndcg@10"]
                                                                           .to_dict(), abs=1e-12)


def test_grid_search_refuses_an_empty_grid(ds) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, qrels = ds
    with pytest.raises(KolmValueError, match="grid is empty"):
        grid_search(BM25Retriever(corpus.iloc[:100]), {}, queries, qrels)


@pytest.mark.parametrize("folds", [0, 1, -1, 2.5, True, "3", 31])
def test_grid_search_refuses_bad_folds_before_running_any_point(ds, folds: Any) -> None:  # type: ignore[no-untyped-def]
    """Bad ``folds`` (not an integer >= 2, or more than the 30 queries) is a KolmValueError
    raised before any point runs, not after the whole grid was searched."""
    corpus, queries, qrels = ds
    calls: list[int] = []
    with pytest.raises(KolmValueError, match="folds"):
        grid_search(_counted(calls)(corpus.iloc[:100]), {"k1": [0.6, 1.2]}, queries, qrels, folds=folds)
    assert not calls


@pytest.mark.parametrize("metric", ["nosuch", "", "ndcg@xx", "ndcg@0"])
def test_grid_search_refuses_a_bad_metric_before_running_any_point(ds, metric: str) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, qrels = ds
    calls: list[int] = []
    with pytest.raises(KolmValueError, match="metric"):
        grid_search(_counted(calls)(corpus.iloc[:100]), {"k1": [0.6, 1.2]}, queries, qrels, metric)
    assert not calls


def test_fingerprints_once_asks_a_shared_stage_once_and_only_inside_the_block() -> None:
    """Five pipelines over one first stage: inside ``fingerprints_once`` the first stage's
    fingerprint is made once, and each pipeline's equals the one made outside it."""
    from kolm_search.compose.fingerprints import fingerprints_once
    from kolm_search.compose.kinds import RerankerStage

    class Counted(RerankerStage):
        calls = 0

        def __init__(self, w: float) -> None:
            self.w = w

        def stage_params(self) -> dict[str, Any]:
            return {"w": self.w}

        def apply_params(self, changes: dict[str, Any]) -> None:
            self.w = changes.get("w", self.w)

        def fingerprint(self) -> str:
            type(self).calls += 1
            return super().fingerprint()

        def transform(self, batch: Any, candidates: Any) -> Any:
            return candidates

    first = Counted(0.0)
    pipes = [BM25Retriever(pd.DataFrame({"id": ["a", "b"], "content": ["x y", "y z"]})) % 2 >> first >> Counted(w)
             for w in (1.0, 2.0, 3.0)]
    alone = [p.fingerprint() for p in pipes]
    assert Counted.calls == 6  # each pipeline asks the shared stage and its own
    Counted.calls = 0
    with fingerprints_once():
        inside = [p.fingerprint() for p in pipes]
        with fingerprints_once():  # nested: the outer block's
            assert pipes[0].fingerprint() == alone[0]
    assert inside == alone and Counted.calls == 4  # the shared one once, each own once
    first.set_params(w=5.0)  # after the block, a change is seen
    assert pipes[0].fingerprint() != alone[0]
