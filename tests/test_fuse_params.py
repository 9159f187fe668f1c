"""``Fuse(..., params=...)`` and ``CompositeRetriever(..., params=...)``: every method of
``fuse``, those with required parameters (``gmnz``, ``rbc``) and the supervised ones (their
tables trained by ``fit_fusion``) included. Oracles: ``fuse`` of the stages' runs with the same
parameters, and ``FittedFusion.fuse`` on held-out queries of Cranfield."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import (
    BM25Retriever,
    CompositeRetriever,
    Fuse,
    KolmError,
    KolmTypeError,
    SearchDocument,
    as_stage,
    fit_fusion,
    fuse,
)
from kolm_search.fusion.methods import METHODS, PER_RUN_PARAMS
from kolm_search.io import load_dataset
from tests.fakes import FailingRetriever, ListRetriever
from tests.test_composite import as_run, ctx, scored

SUPERVISED = sorted(m for m, spec in METHODS.items() if spec.supervised)
NEEDS_PARAMS = {"gmnz": {"gamma": 1.5}, "rbc": {"phi": 0.8}, "logn_isr": {"sigma": 0.3}}


@pytest.fixture(scope="module")
def cranfield() -> Any:
    ds = load_dataset("cranfield")
    return ds, BM25Retriever(ds.corpus), BM25Retriever(ds.corpus, fields=["title"]), ds.judged_queries()


def _by_query(run: pd.DataFrame) -> pd.DataFrame:
    """A run in (qid, rank) order: ``fuse`` sorts by qid, a stage keeps the queries' order."""
    return run.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)


def _same_run(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got, want = _by_query(got), _by_query(want)
    assert got["qid"].tolist() == want["qid"].tolist()
    assert got["doc_id"].tolist() == want["doc_id"].tolist()
    np.testing.assert_allclose(got["score"].to_numpy(), want["score"].to_numpy(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("method", sorted(NEEDS_PARAMS))
def test_a_method_with_parameters_fuses_as_fuse_does(cranfield: Any, method: str) -> None:
    _, a, b, queries = cranfield
    queries = queries.iloc[:60]
    got = Fuse(a % 50, b % 50, method=method, params=NEEDS_PARAMS[method])(queries, limit=100)
    want = fuse([a(queries, limit=50), b(queries, limit=50)], method=method, params=NEEDS_PARAMS[method], limit=100)
    _same_run(got, want)


@pytest.mark.parametrize("method", SUPERVISED)
def test_a_supervised_method_fuses_held_out_queries_as_its_fitted_fusion(cranfield: Any, method: str) -> None:
    ds, a, b, queries = cranfield
    train, test = queries.iloc[:120], queries.iloc[120:]
    fitted = fit_fusion({"a": a(train, limit=100), "b": b(train, limit=100)}, ds.qrels, method, progress=False)
    stage = Fuse(a, b, method=fitted.method, norm=fitted.norm, params=fitted.params)
    _same_run(stage(test, limit=100), fitted.fuse({"a": a(test, limit=100), "b": b(test, limit=100)}, limit=100))
    reversed_params = {name: list(value)[::-1] if name in PER_RUN_PARAMS else value
                       for name, value in fitted.params.items()}  # each stage's tables follow it
    swapped = Fuse(b % 100, a % 100, method=fitted.method, norm=fitted.norm, params=reversed_params)(test, limit=200)
    whole = Fuse(a % 100, b % 100, method=fitted.method, norm=fitted.norm, params=fitted.params)(test, limit=200)
    assert len(whole) > 100 * len(test)  # every fused document (ties may be ordered otherwise)
    assert dict(zip(zip(swapped["qid"], swapped["doc_id"]), swapped["score"])) == \
        pytest.approx(dict(zip(zip(whole["qid"], whole["doc_id"]), whole["score"])), rel=1e-12)


@pytest.mark.parametrize(("method", "params", "match"), [
    ("gmnz", None, r"gmnz.*gamma"),
    ("rbc", {}, r"rbc.*phi"),
    ("probfuse", None, r"probfuse.*probs.*fit_fusion"),
    ("rbc", {"phi": 1.5}, r"phi"),
    ("gmnz", {"gamma": 1.0, "phi": 0.5}, r"phi"),
    ("probfuse", {"probs": [[0.5, 0.2]]}, r"probs.*one table per run \(2\)"),
    ("probfuse", {"probs": [[0.5, np.nan], [0.1]]}, r"finite"),
    ("rrf", {"k": 10}, None),  # k in params is the k argument when that is the default
    ("wsum", {"weights": [2.0, 1.0]}, None),
])
def test_params_are_checked_when_built(method: str, params: Any, match: str | None) -> None:
    a, b = ListRetriever(scored(["x"], [1.0])), ListRetriever(scored(["y"], [1.0]))
    if match is None:
        built = CompositeRetriever([a, b], method=method, params=params)
        assert built.params is None  # none left once k and weights are taken out
        assert (built.k, built.weights) == ((10.0, None) if method == "rrf" else (60.0, [2.0, 1.0]))
        return
    with pytest.raises(KolmError, match=match):
        CompositeRetriever([a, b], method=method, params=params)


def test_fuse_names_itself_and_the_argument_that_is_no_stage() -> None:
    bm25 = BM25Retriever(pd.DataFrame({"id": ["a", "b"], "content": ["x y", "y z"]}))
    for bad in (1, "bm25", None):
        with pytest.raises(KolmTypeError, match=r"^Fuse: stages\[1\]: .* cannot be a stage"):
            Fuse(bm25, bad)
    with pytest.raises(KolmError, match=r"^Fuse: stages\[0\]: as_stage\(ListRetriever\).*needs table="):
        Fuse(ListRetriever(scored(["x"], [1.0])), bm25)


def test_k_or_weights_given_twice_are_refused() -> None:
    a = ListRetriever(scored(["x"], [1.0]))
    with pytest.raises(KolmError, match="k given twice"):
        CompositeRetriever([a], k=20, params={"k": 30})
    with pytest.raises(KolmError, match="weights given twice"):
        CompositeRetriever([a], method="wsum", weights=[1.0], params={"weights": [2.0]})
    assert CompositeRetriever([a], k=30, params={"k": 30}).k == 30.0


def test_params_are_kept_as_plain_numbers_and_lists() -> None:
    a, b = ListRetriever(scored(["x"], [1.0])), ListRetriever(scored(["y"], [1.0]))
    tables = np.array([[0.5, 0.25], [0.4, 0.1]])
    comp = CompositeRetriever([a, b], method="slidefuse", params={"probs": tables, "w": np.int64(1)})
    assert comp.params == {"probs": [[0.5, 0.25], [0.4, 0.1]], "w": 1}
    assert type(comp.params["w"]) is int
    tables[0, 0] = 0.9  # the caller's array is not held
    assert comp.params["probs"][0][0] == 0.5


@settings(max_examples=40, deadline=None)
@given(data=st.data(), method=st.sampled_from(["gmnz", "rbc", "logn_isr", "probfuse", "posfuse", "mapfuse"]),
       limit=st.integers(1, 12), norm=st.sampled_from([None, "min-max"]))
async def test_the_documents_path_fuses_as_fuse_does(data: st.DataObject, method: str, limit: int,
                                                      norm: str | None) -> None:
    lists = []
    for _ in range(data.draw(st.integers(1, 3))):
        ids = data.draw(st.lists(st.sampled_from("abcdefghijklmnop"), max_size=15, unique=True))
        vals = sorted(data.draw(st.lists(st.integers(-5, 20), min_size=len(ids), max_size=len(ids))), reverse=True)
        lists.append(scored(ids, [float(v) for v in vals]))
    n = len(lists)
    floats = st.floats(0.0, 1.0, allow_nan=False)
    params: Any = {
        "gmnz": {"gamma": data.draw(st.floats(0.1, 3.0))}, "rbc": {"phi": data.draw(st.floats(0.05, 0.95))},
        "logn_isr": {"sigma": data.draw(st.floats(0.01, 1.0))},
        "probfuse": {"probs": [data.draw(st.lists(floats, min_size=1, max_size=4)) for _ in range(n)]},
        "posfuse": {"probs": [data.draw(st.lists(floats, min_size=1, max_size=15)) for _ in range(n)]},
        "mapfuse": {"map_scores": data.draw(st.lists(floats, min_size=n, max_size=n))}}[method]
    comp = CompositeRetriever([ListRetriever(x) for x in lists], method=method, norm=norm, params=params)
    got = await comp.retrieve(ctx(limit))
    expected = fuse([as_run(x[:limit]) for x in lists], method, norm=norm, params=params, limit=limit)
    assert [x.id for x in got] == list(expected["doc_id"])
    assert [x.score for x in got] == pytest.approx(list(expected["score"]), rel=1e-9, abs=1e-12)


async def test_best_effort_drops_a_failing_childs_tables_with_it() -> None:
    good = scored(list("abcd"), [4.0, 3.0, 2.0, 1.0])
    tables = {"probs": [[0.9, 0.1], [0.2, 0.7]]}
    comp = CompositeRetriever([FailingRetriever(), ListRetriever(good)], method="posfuse", params=tables,
                              strategy="best-effort")
    got = await comp.retrieve(ctx(4))
    alone = await CompositeRetriever([ListRetriever(good)], method="posfuse",
                                     params={"probs": [[0.2, 0.7]]}).retrieve(ctx(4))
    assert [(x.id, x.score) for x in got] == [(x.id, x.score) for x in alone]
    assert [x.id for x in got][:2] == ["b", "a"]  # posfuse: P[1] = 0.7 > P[0] = 0.2


def test_best_effort_batch_path_drops_a_failing_stages_tables(cranfield: Any) -> None:
    _, a, b, queries = cranfield

    class Down:
        table = a.table

        def retrieve(self, context: Any) -> Any:
            raise RuntimeError("shard down")

        def retrieve_batch(self, batch: Any) -> Any:
            raise RuntimeError("shard down")

    queries = queries.iloc[:20]
    tables = {"probs": [[0.9, 0.5, 0.1], [0.3, 0.6, 0.2]]}
    got = Fuse(as_stage(Down()), b, method="posfuse", params=tables, strategy="best-effort")(queries, limit=30)
    alone = Fuse(b, method="posfuse", params={"probs": [tables["probs"][1]]})(queries, limit=30)
    _same_run(got, alone)


def test_params_are_parameters_of_the_stage(cranfield: Any) -> None:
    _, a, b, queries = cranfield
    queries = queries.iloc[:30]
    stage = Fuse(a, b, method="gmnz", params={"gamma": 1.0})
    before = stage.fingerprint()
    assert stage.get_params()["params"] == {"gamma": 1.0}
    stage.set_params(params={"gamma": 3.0})
    assert stage.fingerprint() != before
    _same_run(stage(queries, limit=20),
              fuse([a(queries, limit=20), b(queries, limit=20)], method="gmnz", params={"gamma": 3.0}, limit=20))
    with pytest.raises(KolmError, match="phi"):
        stage.set_params(method="rbc")  # rbc needs phi: refused, nothing changes
    assert (stage.method, stage.params) == ("gmnz", {"gamma": 3.0})
    stage.set_params(method="rbc", params={"phi": 0.7})
    assert "params={'phi': 0.7}" in repr(stage)


def test_a_saved_composite_keeps_its_params(cranfield: Any, tmp_path: Any) -> None:
    ds, a, b, queries = cranfield
    queries = queries.iloc[:30]
    train = queries.iloc[:20]
    fitted = fit_fusion({"a": a(train, limit=50), "b": b(train, limit=50)}, ds.qrels, "probfuse", progress=False)
    comp = CompositeRetriever([a, b], method=fitted.method, norm=fitted.norm, params=fitted.params)
    comp.save(tmp_path / "c")
    back = CompositeRetriever.load(tmp_path / "c")
    assert back.params == comp.params and back.method == "probfuse"
    _same_run(as_stage(back)(queries, limit=40), as_stage(comp)(queries, limit=40))


def test_a_document_list_without_params_behaves_as_before() -> None:
    comp = CompositeRetriever([ListRetriever([SearchDocument(id="a", content="a")])])
    assert comp.params is None and "params" not in repr(comp)
    assert comp.get_params()["params"] is None


def test_a_saved_fuse_loads_as_a_fuse_with_its_fingerprint(cranfield: Any, tmp_path: Any) -> None:
    """``Fuse.load`` (inherited from CompositeRetriever) built a Fuse of the wrong arguments on main."""
    _, a, b, queries = cranfield
    queries = queries.iloc[:25]
    stage = Fuse(a, b, method="rbc", params={"phi": 0.7}, weights=[2.0, 1.0])
    stage.save(tmp_path / "f")
    back = Fuse.load(tmp_path / "f")
    assert type(back) is Fuse and back.fingerprint() == stage.fingerprint()
    _same_run(back(queries, limit=30), stage(queries, limit=30))
    assert type(CompositeRetriever.load(tmp_path / "f")) is CompositeRetriever
    copied = copy.copy(stage)
    assert type(copied) is Fuse and copied.fingerprint() == stage.fingerprint()
    stage.set_params(params={"phi": 0.5})
    assert type(stage) is Fuse and repr(stage).startswith("Fuse(") and "'phi': 0.5" in repr(stage)


def test_from_fitted_puts_the_stages_in_the_fitted_runs_order(cranfield: Any) -> None:
    """``Fuse.from_fitted(f, {name: stage})``: each table goes to the stage named as its run,
    whatever the dict's order (the oracle: ``FittedFusion.fuse`` of those stages' runs)."""
    ds, a, b, queries = cranfield
    train, test = queries.iloc[:120], queries.iloc[120:160]
    fitted = fit_fusion({"title": b(train, limit=100), "body": a(train, limit=100)}, ds.qrels, "posfuse",
                        progress=False)
    stage = Fuse.from_fitted(fitted, {"body": a, "title": b}, strategy="best-effort")
    assert stage.strategy == "best-effort" and stage.retrievers == [b, a]
    _same_run(stage(test, limit=100), fitted.fuse({"title": b(test, limit=100), "body": a(test, limit=100)},
                                                  limit=100))
    with pytest.raises(KolmError, match=r"stages \['body', 'other'\] are not the fitted runs \['title', 'body'\]"):
        Fuse.from_fitted(fitted, {"body": a, "other": b})
    with pytest.raises(KolmError, match=r"\['method'\] come from the fitted fusion"):
        Fuse.from_fitted(fitted, {"body": a, "title": b}, method="rrf")
    with pytest.raises(KolmError, match="FittedFusion"):
        Fuse.from_fitted(fitted.params, {"body": a, "title": b})  # type: ignore[arg-type]
    with pytest.raises(KolmError, match="dict"):
        Fuse.from_fitted(fitted, [a, b])  # type: ignore[arg-type]
