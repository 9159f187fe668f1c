"""``leave_one_collection_out`` against a plain-Python reference (pytrec_eval per query, scipy's
paired t-test), and the property the protocol exists for: a held-out collection's judgements
never reach its own choice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from kolm_search import leave_one_collection_out
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.evaluation.loco import collection_runs

DOCS = [f"d{i}" for i in range(12)]


def random_qrels(rng: np.random.Generator, n_q: int) -> pd.DataFrame:
    rows = [(f"q{q}", str(d), int(rng.integers(0, 3))) for q in range(n_q) for d in rng.choice(DOCS, 4, replace=False)]
    return pd.DataFrame(rows, columns=["qid", "doc_id", "relevance"])


def random_run(rng: np.random.Generator, n_q: int) -> pd.DataFrame:
    rows = [(f"q{q}", str(d), float(rng.integers(0, 5))) for q in range(n_q)
            for d in rng.choice(DOCS, int(rng.integers(1, 10)), replace=False)]  # ties on purpose
    return pd.DataFrame(rows, columns=["qid", "doc_id", "score"])


def random_case(seed: int, n_colls: int = 4, n_cands: int = 4) -> tuple[dict, dict, dict]:
    rng = np.random.default_rng(seed)
    sizes = {f"c{i}": int(rng.integers(3, 9)) for i in range(n_colls)}
    qrels = {c: random_qrels(rng, n) for c, n in sizes.items()}
    runs = {c: {f"cand{j}": random_run(rng, n) for j in range(n_cands)} for c, n in sizes.items()}
    baseline = {c: random_run(rng, n) for c, n in sizes.items()}
    return runs, qrels, baseline


def trec_ndcg10(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, float]:
    q: dict[str, dict[str, int]] = {}
    for row in qrels.itertuples(index=False):
        q.setdefault(row.qid, {})[row.doc_id] = int(row.relevance)
    r: dict[str, dict[str, float]] = {}
    for row in run.itertuples(index=False):
        r.setdefault(row.qid, {})[row.doc_id] = float(row.score)
    return {qid: v["ndcg_cut_10"] for qid, v in pytrec_eval.RelevanceEvaluator(q, {"ndcg_cut.10"}).evaluate(r).items()}


def reference(runs: dict, qrels: dict, baseline: dict, criterion: str) -> list[tuple[str, str, float, float, float]]:
    """Plain Python: per held-out collection, (collection, chosen, held-out mean, baseline mean, t-test p)."""
    per: dict[str, dict[str, list[float]]] = {}
    for c, cands in runs.items():
        judged = set(qrels[c]["qid"])
        answered = set().union(*(set(r["qid"]) for r in [*cands.values(), baseline[c]])) & judged
        qids = sorted(answered)
        per[c] = {}
        for name, run in [*cands.items(), ("\x00b", baseline[c])]:
            scores = trec_ndcg10(run, qrels[c])
            per[c][name] = [scores.get(q, 0.0) for q in qids]
    out = []
    for c in runs:
        train = [o for o in runs if o != c]
        best_name, best = None, -np.inf
        for name in runs[c]:
            if criterion == "mean":
                value = sum(np.mean(per[o][name]) for o in train) / len(train)
            else:
                value = min(np.mean(per[o][name]) - np.mean(per[o]["\x00b"]) for o in train)
            if value > best + 1e-12:
                best_name, best = name, value
        held, base = per[c][best_name], per[c]["\x00b"]
        p = 1.0 if np.allclose(held, base) else float(stats.ttest_rel(held, base).pvalue)
        out.append((c, best_name, float(np.mean(held)), float(np.mean(base)), p))
    return out


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), criterion=st.sampled_from(["mean", "worst-delta"]))
def test_equals_the_reference(seed: int, criterion: str) -> None:
    runs, qrels, baseline = random_case(seed)
    got = leave_one_collection_out(runs, qrels, baseline, criterion=criterion, tests=("t",))  # type: ignore[arg-type]
    expected = reference(runs, qrels, baseline, criterion)
    assert list(got.folds["collection"]) == [e[0] for e in expected]
    assert list(got.folds["chosen"]) == [e[1] for e in expected]
    np.testing.assert_allclose(got.folds["score"], [e[2] for e in expected], atol=1e-12)
    np.testing.assert_allclose(got.folds["baseline"], [e[3] for e in expected], atol=1e-12)
    np.testing.assert_allclose(got.folds["p_t"], [e[4] for e in expected], rtol=1e-9)
    assert got.mean == pytest.approx(np.mean([e[2] for e in expected]))
    assert got.delta == pytest.approx(np.mean([e[2] - e[3] for e in expected]))
    assert len(got.per_query) == got.folds["n_queries"].sum()


def perfect_run(qrels: pd.DataFrame) -> pd.DataFrame:
    """The judged documents of each query ranked by their grade: nDCG@10 1 on these qrels."""
    q = qrels[qrels["relevance"] > 0]
    return pd.DataFrame({"qid": q["qid"], "doc_id": q["doc_id"], "score": q["relevance"].astype(float)})


def nothing(n_q: int) -> pd.DataFrame:
    """A run that answers every query with an unjudged document (nDCG@10 0)."""
    return pd.DataFrame({"qid": [f"q{q}" for q in range(n_q)], "doc_id": "zz", "score": 1.0})


@pytest.mark.parametrize("criterion", ["mean", "worst-delta"])
def test_held_out_judgements_would_flip_the_choice_but_do_not(criterion: str) -> None:
    """``spy`` is perfect on the held-out collection's own qrels (made from them) and useless
    elsewhere; ``steady`` gets one query of six right on the others and nothing on the held-out
    one. With the held-out judgements, ``spy`` wins (alone, and on the mean of all rows); each
    fold must still choose ``steady``."""
    rng = np.random.default_rng(3)
    colls = ["a", "b", "c"]
    qrels = {c: random_qrels(rng, 6).assign(relevance=lambda f: f["relevance"] + 1) for c in colls}
    baseline = {c: random_run(rng, 6) for c in colls}
    for held in colls:
        runs = {c: {"spy": perfect_run(qrels[c]) if c == held else nothing(6),
                    "steady": nothing(6) if c == held else perfect_run(qrels[c][qrels[c]["qid"] == "q0"])}
                for c in colls}
        got = leave_one_collection_out(runs, qrels, baseline, criterion=criterion, tests=())  # type: ignore[arg-type]
        assert got.scores.loc[held, "spy"] == pytest.approx(1.0) and got.scores.loc[held, "steady"] == 0.0
        assert got.scores["spy"].mean() > got.scores["steady"].mean()
        row = got.folds.set_index("collection").loc[held]
        assert row["chosen"] == "steady", got.scores


@pytest.mark.parametrize(("seed", "criterion"), [(0, "mean"), (1, "worst-delta"), (2, "mean")])
def test_a_collections_choice_does_not_depend_on_its_qrels(seed: int, criterion: str) -> None:
    """Replace one collection's judgements by others (random ones, or ones made to crown a
    candidate): its fold's choice and training score are unchanged."""
    runs, qrels, baseline = random_case(seed, n_colls=3, n_cands=3)
    first = leave_one_collection_out(runs, qrels, baseline, criterion=criterion, tests=())  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    for i, held in enumerate(runs):
        crowned = runs[held][f"cand{int(rng.integers(0, 3))}"][["qid", "doc_id"]].assign(relevance=1)
        poisoned = crowned if i % 2 == 0 else random_qrels(rng, 8)
        again = leave_one_collection_out(runs, {**qrels, held: poisoned}, baseline,  # type: ignore[arg-type]
                                         criterion=criterion, tests=())
        assert not again.scores.loc[held].equals(first.scores.loc[held])  # the poison reached the table
        a, b = first.folds.set_index("collection"), again.folds.set_index("collection")
        assert a.loc[held, "chosen"] == b.loc[held, "chosen"]
        assert a.loc[held, "train_score"] == b.loc[held, "train_score"]


def test_collection_runs_hands_factories_documents_and_queries_only() -> None:
    seen = []

    def factory(documents: object, queries: object) -> pd.DataFrame:
        seen.append((documents, queries))
        return pd.DataFrame({"qid": ["q0"], "doc_id": ["d0"], "score": [1.0]})

    docs_a, queries_a, docs_b, queries_b = object(), object(), object(), object()
    out = collection_runs({"x": factory, "y": factory}, {"a": (docs_a, queries_a), "b": (docs_b, queries_b)})
    assert list(out) == ["a", "b"] and list(out["a"]) == ["x", "y"]
    assert seen == [(docs_a, queries_a)] * 2 + [(docs_b, queries_b)] * 2
    with pytest.raises(KolmTypeError, match="candidate 'x'"):
        collection_runs({"x": 3}, {"a": (docs_a, queries_a)})  # type: ignore[dict-item]
    with pytest.raises(KolmTypeError, match="collection 'a'"):
        collection_runs({"x": factory}, {"a": docs_a})


def test_markdown_and_pooled_tests() -> None:
    runs, qrels, baseline = random_case(5)
    got = leave_one_collection_out(runs, qrels, baseline)
    text = got.to_markdown()
    assert text.count("\n| c") == 4 and "mean of 4" in text and "p (fisher)" in text
    pq = got.per_query
    assert got.pooled_p["t"] == pytest.approx(stats.ttest_rel(pq["score"], pq["baseline"]).pvalue)
    alone = leave_one_collection_out(runs, qrels)
    assert "baseline" not in alone.to_markdown() and np.isnan(alone.baseline_mean)
    assert list(alone.folds["chosen"]) == list(got.folds["chosen"])


def test_bad_input() -> None:
    runs, qrels, baseline = random_case(1, n_colls=2)
    with pytest.raises(KolmValueError, match="at least two collections"):
        leave_one_collection_out({"c0": runs["c0"]}, qrels, baseline)
    with pytest.raises(KolmValueError, match="same candidates"):
        leave_one_collection_out({"c0": runs["c0"], "c1": {"other": runs["c1"]["cand0"]}}, qrels, baseline)
    with pytest.raises(KolmValueError, match="no qrels for collection 'c1'"):
        leave_one_collection_out(runs, {"c0": qrels["c0"]}, baseline)
    with pytest.raises(KolmValueError, match="no baseline run for collection 'c1'"):
        leave_one_collection_out(runs, qrels, {"c0": baseline["c0"]})
    with pytest.raises(KolmValueError, match="worst-delta"):
        leave_one_collection_out(runs, qrels, criterion="worst-delta", tests=())
    with pytest.raises(KolmValueError, match="give baseline"):
        leave_one_collection_out(runs, qrels, tests=("t",))
    with pytest.raises(KolmValueError, match="criterion"):
        leave_one_collection_out(runs, qrels, baseline, criterion="median")  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="tests"):
        leave_one_collection_out(runs, qrels, baseline, tests=("z",))  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="one metric"):
        leave_one_collection_out(runs, qrels, baseline, metric=["ndcg@10", "map"])
    with pytest.raises(KolmTypeError, match="runs"):
        leave_one_collection_out([runs["c0"]], qrels, baseline)  # type: ignore[arg-type]
    empty = {"c0": qrels["c0"], "c1": qrels["c1"].iloc[:0]}
    with pytest.raises(KolmValueError, match="collection 'c1' has 0"):
        leave_one_collection_out(runs, empty, baseline)
