"""LTRReranker (LambdaMART over a feature union), its features and K-fold cross-validation over queries."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kolm_search import evaluate
from kolm_search.compose.runner import sharing
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.ltr import LTRReranker, cross_validated_run
from kolm_search.retrievers.ltr_features import DocumentLength, QueryLength

pytest.importorskip("lightgbm")

SMALL = {"n_estimators": 20, "min_data_in_leaf": 5, "num_leaves": 7, "learning_rate": 0.1}


@pytest.fixture(scope="module")
def setup(cranfield: dict[str, pd.DataFrame]) -> tuple[BM25Retriever, pd.DataFrame, pd.DataFrame]:
    table = DocumentTable.from_frame(cranfield["corpus"])
    queries = cranfield["queries"].head(60).reset_index(drop=True)
    qrels = cranfield["qrels"]
    return BM25Retriever(table), queries, qrels[qrels["qid"].astype(str).isin(queries["qid"].astype(str))]


def _features(bm: BM25Retriever) -> LTRReranker:
    return LTRReranker(((bm % 50) ** FeedbackRetriever(bm, "bo1")) ** (DocumentLength() ** QueryLength()), **SMALL)


def test_features_are_the_union_of_the_stages(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, _ = setup
    X, keys = _features(bm)._frames(queries.head(3))
    assert X.shape == (150, 4) and X.dtype == np.float64
    table = bm.table
    lengths = {i: len(t.split()) for i, t in zip(table.ids, table.texts(("title", "content")), strict=True)}
    np.testing.assert_allclose(X[:, 2], np.log1p([lengths[d] for d in keys["doc_id"]]))
    words = dict(zip(queries["qid"].astype(str), queries["query"].str.split().str.len(), strict=True))
    np.testing.assert_allclose(X[:, 3], np.log1p([words[q] for q in keys["qid"]]))
    bm_run = bm(queries.head(3), limit=50)
    np.testing.assert_allclose(X[:, 0], bm_run["score"].to_numpy())


def test_before_fit_the_stage_refuses_to_run(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, _ = setup
    with pytest.raises(KolmError, match="not trained"):
        _features(bm)(queries.head(2))


def test_fits_are_seeded_and_learn(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    a, b = _features(bm).fit(queries, qrels), _features(bm).fit(queries, qrels)
    assert a.booster.model_to_string() == b.booster.model_to_string()
    assert a.fingerprint() == b.fingerprint()
    ra, rb = a(queries, limit=50), b(queries, limit=50)
    pd.testing.assert_frame_equal(ra, rb)
    # the model re-orders BM25's 50 candidates: same documents per query, learned order
    base = bm(queries, limit=50)
    assert (ra.groupby("qid")["doc_id"].apply(frozenset) == base.groupby("qid")["doc_id"].apply(frozenset)).all()
    assert evaluate(ra, qrels)["ndcg@10"] > evaluate(base, qrels)["ndcg@10"]  # in sample: fitted to these


def test_the_fingerprint_holds_the_model(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm)
    unfitted = stage.fingerprint()
    stage.fit(queries.head(30), qrels)
    first = stage.fingerprint()
    stage.fit(queries.tail(30), qrels)
    assert len({unfitted, first, stage.fingerprint()}) == 3
    with sharing():  # a shared run of one model is not the output of another
        one = stage(queries.head(5), limit=10)
        stage.fit(queries.head(30), qrels)
        two = stage(queries.head(5), limit=10)
    assert not one.equals(two)


def test_feature_width_and_type_are_checked(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm).fit(queries.head(30), qrels)
    stage.set_params(features=bm % 50)
    with pytest.raises(KolmValueError, match="gives 1 features; the model was fitted on 4"):
        stage(queries.head(2))
    with pytest.raises(KolmTypeError, match="retrieving stage"):
        LTRReranker(DocumentLength())


def test_get_params_round_trip(setup) -> None:  # type: ignore[no-untyped-def]
    bm, _, _ = setup
    stage = _features(bm)
    params = stage.get_params(deep=False)
    assert params["n_estimators"] == 20 and params["seed"] == 0 and params["num_threads"] == 1
    other = LTRReranker(bm % 10).set_params(**params)
    assert other.get_params(deep=False) == params and other.fingerprint() == stage.fingerprint()
    stage.set_params(num_leaves=7, features__s3__log=False)
    assert stage.get_params()["num_leaves"] == 7 and stage.lightgbm_params()["num_leaves"] == 7
    assert stage.get_params()["features__s3__log"] is False
    for bad in ({"num_leaves": 0}, {"learning_rate": -1.0}, {"seed": 1.5}, {"nope": 1}):
        with pytest.raises((KolmValueError, KolmTypeError)):
            stage.set_params(**bad)
    assert stage.get_params()["num_leaves"] == 7  # a refused change leaves the stage as it was


def test_cross_validation_never_shows_a_held_out_query(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm)
    seen: list[tuple[set[str], set[str]]] = []
    fit_rows = LTRReranker._fit_rows

    def spy(self, X, keys, judged, valid):  # type: ignore[no-untyped-def]
        seen.append((set(keys["qid"]), set(judged["qid"].astype(str))))
        return fit_rows(self, X, keys, judged, valid)

    monkeypatch.setattr(LTRReranker, "_fit_rows", spy)
    run = cross_validated_run(stage, queries, qrels, folds=3, seed=1)
    all_q = set(queries["qid"].astype(str))
    assert len(seen) == 3 and set(run["qid"]) == all_q
    held = [all_q - trained for trained, _ in seen]
    assert set().union(*held) == all_q and sum(len(h) for h in held) == len(all_q)  # folds partition the queries
    for (trained, judged), out in zip(seen, held, strict=True):
        assert not trained & out and not judged & out  # neither the queries nor their judgements
    # each held-out fold is ranked as the stage fitted on the other folds ranks it
    monkeypatch.undo()
    last = held[-1]
    stage.fit(queries[~queries["qid"].astype(str).isin(last)], qrels[~qrels["qid"].astype(str).isin(last)])
    direct = stage(queries[queries["qid"].astype(str).isin(last)], limit=100)
    mine = run[run["qid"].isin(last)].reset_index(drop=True)
    # the same model scores: equal scores for the same (query, document); the candidate sets agree but
    # where BM25's cutoff falls among tied documents (its tie order depends on the batch)
    both = direct.merge(mine, on=["qid", "doc_id"], suffixes=("_direct", "_cv"))
    assert len(both) >= 0.98 * len(direct)
    np.testing.assert_allclose(both["score_direct"], both["score_cv"])


def test_fit_stops_early_on_validation_queries(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm).set_params(n_estimators=200)
    stage.fit(queries.head(40), qrels, valid=(queries.tail(20), qrels))
    assert 1 <= stage.booster.best_iteration <= 200
    assert len(stage(queries.tail(5), limit=10)) == 50


def test_a_model_started_from_a_feature_keeps_its_order_until_trees_move_it(setup) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm).set_params(start_from=0, start_weight=1e6, n_estimators=1, learning_rate=1e-6)
    stage.fit(queries.head(40), qrels)
    got = stage(queries.tail(10), limit=50)
    base = bm(queries.tail(10), limit=50)  # column 0 is BM25's score: its per-query min-max keeps BM25's order
    pd.testing.assert_frame_equal(got[["qid", "doc_id"]].reset_index(drop=True),
                                  base[["qid", "doc_id"]].reset_index(drop=True))
    with pytest.raises(KolmValueError, match="start_from=9"):
        _features(bm).set_params(start_from=9).fit(queries.head(10), qrels)


@pytest.mark.parametrize("norm", ["minmax", "rank", "minmax+rank", "zscore"])
def test_query_norm_is_applied_alike_when_fitting_and_ranking(setup, norm: str) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm).set_params(query_norm=norm, start_from=None).fit(queries.head(40), qrels)
    run = stage(queries.tail(10), limit=50)
    X, keys = stage.candidate_features(queries.tail(10))
    from kolm_search.retrievers.ltr_norm import normalise_per_query

    want = stage.booster.predict(normalise_per_query(X, keys["group"].to_numpy(), norm))
    both = run.merge(keys.assign(want=want), on=["qid", "doc_id"])
    np.testing.assert_allclose(both["score"], both["want"])
    with pytest.raises(KolmValueError, match="query_norm"):
        stage.set_params(query_norm="l2")


def test_early_stopping_slice_comes_from_the_training_queries(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm).set_params(valid_fraction=0.25, n_estimators=100)
    split = LTRReranker._inner_split
    seen: list[tuple[set[str], set[str], set[str]]] = []

    def spy(self, X, keys):  # type: ignore[no-untyped-def]
        (tx, tkeys), held = split(self, X, keys)
        seen.append((set(keys["qid"]), set(tkeys["qid"]), set(held[1]["qid"])))
        return (tx, tkeys), held

    monkeypatch.setattr(LTRReranker, "_inner_split", spy)
    run = cross_validated_run(stage, queries, qrels, folds=3, seed=1)
    assert len(seen) == 3 and set(run["qid"]) == set(queries["qid"].astype(str))
    for given, fitted, held in seen:
        assert held and held <= given and not held & fitted and len(held) == round(0.25 * len(given))
    assert 1 <= stage.booster.best_iteration <= 100
    for bad in (1.0, -0.1, True):
        with pytest.raises(KolmValueError, match="valid_fraction"):
            stage.set_params(valid_fraction=bad)


def test_extra_training_rows_join_every_fold_and_never_a_held_out_query(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bm, queries, qrels = setup
    stage = _features(bm)
    mine, other = queries.head(30), queries.tail(30)  # "other" plays another collection's judged queries
    X, keys = stage.candidate_features(other)
    seen: list[set[str]] = []
    fit_rows = LTRReranker._fit_rows

    def spy(self, X, keys, judged, valid):  # type: ignore[no-untyped-def]
        assert not np.any(np.diff(keys["group"].to_numpy()) < 0)  # still grouped by query
        seen.append(set(keys["qid"]))
        return fit_rows(self, X, keys, judged, valid)

    monkeypatch.setattr(LTRReranker, "_fit_rows", spy)
    mq = qrels[qrels["qid"].astype(str).isin(mine["qid"].astype(str))]
    oq = qrels[qrels["qid"].astype(str).isin(other["qid"].astype(str))]
    run = cross_validated_run(stage, mine, mq, folds=3, seed=0, extra=(X, keys, oq))
    assert set(run["qid"]) == set(mine["qid"].astype(str)) and len(seen) == 3
    others = set(other["qid"].astype(str))
    for trained in seen:
        assert others <= trained
    held = [set(mine["qid"].astype(str)) - (t - others) for t in seen]
    assert sum(len(h) for h in held) == len(mine)  # each of mine held out once, the extra never
    with pytest.raises(KolmValueError, match="share qids"):
        cross_validated_run(stage, other, oq, folds=3, extra=(X, keys, oq))
