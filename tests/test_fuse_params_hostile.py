"""``Fuse``/``CompositeRetriever`` ``params=`` under hostile input: tables that are not tables of
numbers, windows past any list, parameters set again from a retrained ``fit_fusion``. Oracles:
``fuse`` of the same runs, and the fusion built whole with the new parameters."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, CompositeRetriever, Fuse, KolmError, fit_fusion, fuse
from kolm_search.io import load_dataset
from tests.fakes import FlakyShard, ListRetriever
from tests.test_composite import as_run, ctx, scored


@pytest.fixture(scope="module")
def cranfield() -> Any:
    ds = load_dataset("cranfield")
    return ds, BM25Retriever(ds.corpus), BM25Retriever(ds.corpus, fields=["title"]), ds.judged_queries()


@pytest.mark.parametrize("tables", [
    {"a": [0.5], "b": [0.3]},  # by run name: fuse takes them in the runs' order, a list
    [["0.5"], [0.3]],
    [[{}], [0.3]],
    [[None], [0.3]],
    [[True, 0.2], [0.3]],
])
def test_tables_that_are_not_lists_of_numbers_are_refused_by_name(tables: Any) -> None:
    a, b = ListRetriever(scored(["x"], [1.0])), ListRetriever(scored(["y"], [1.0]))
    with pytest.raises(KolmError, match=r"params\['probs'\]"):
        CompositeRetriever([a, b], method="probfuse", params={"probs": tables})
    with pytest.raises(KolmError, match=r"params\['probs'\]"):
        fuse([as_run(scored(["x"], [1.0])), as_run(scored(["y"], [1.0]))], "probfuse", params={"probs": tables})


@pytest.mark.parametrize("w", [3, 2**40, 2**63 - 1, 10**30])
async def test_a_slidefuse_window_past_every_list_is_the_whole_list(w: int) -> None:
    lists = [scored(list("xywv"), [4.0, 3.0, 2.0, 1.0]), scored(list("yzx"), [3.0, 2.0, 1.0])]
    tables = [[0.9, 0.5, 0.3, 0.1], [0.6, 0.2, 0.1]]
    got = await CompositeRetriever([ListRetriever(x) for x in lists], method="slidefuse",
                                   params={"probs": tables, "w": w}).retrieve(ctx(10))
    want = fuse([as_run(x) for x in lists], "slidefuse", params={"probs": tables, "w": 3}, limit=10)
    assert [d.id for d in got] == list(want["doc_id"])
    assert [d.score for d in got] == pytest.approx(list(want["score"]), rel=1e-12)


@pytest.mark.parametrize("method", ["wsum", "rrf"])
def test_params_of_a_retrained_fusion_can_be_set_on_the_stage(cranfield: Any, method: str) -> None:
    """``FittedFusion.params`` holding ``weights`` (wsum) or ``k`` (rrf): set on a stage built
    from an earlier fit, they replace its weights or k, as a stage built whole from them has."""
    ds, a, b, queries = cranfield
    first, second = queries.iloc[:40], queries.iloc[40:100]

    def fitted(q: Any) -> Any:
        return fit_fusion({"a": a(q, limit=50), "b": b(q, limit=50)}, ds.qrels, method, progress=False)

    f1, f2 = fitted(first), fitted(second)
    assert {"wsum": "weights", "rrf": "k"}[method] in f2.params
    stage = Fuse(a % 50, b % 50, method=f1.method, norm=f1.norm, params=f1.params)
    stage.set_params(params=f2.params)
    whole = Fuse(a % 50, b % 50, method=f2.method, norm=f2.norm, params=f2.params)
    assert (stage.k, stage.weights, stage.params) == (whole.k, whole.weights, whole.params)
    assert stage.fingerprint() == whole.fingerprint()
    with pytest.raises(KolmError, match="given twice"):  # both named in one call: still refused
        stage.set_params(k=5.0, weights=[1.0, 1.0], params={"k": 7.0, "weights": [2.0, 1.0]})
    assert stage.fingerprint() == whole.fingerprint()


def test_repr_shows_a_long_number_and_summarises_long_tables(cranfield: Any) -> None:
    _, a, b, _ = cranfield
    tables = [[0.5] * 40, [0.25] * 40]
    for stage in (CompositeRetriever([a, b], method="slidefuse", params={"probs": tables, "w": 10**70}),
                  Fuse(a, b, method="slidefuse", params={"probs": tables, "w": 10**70})):
        shown = repr(stage)
        assert f"'w': {10**70}" in shown and "'probs': <2 per run>" in shown


@pytest.mark.parametrize("change", [{"params": {"weights": [3.0, 1.0]}}, {"params": {"k": 7.0}}])
def test_set_params_is_all_or_nothing_when_params_carry_k_or_weights(cranfield: Any, change: dict[str, Any]) -> None:
    """``params`` holding ``k``/``weights`` set those arguments too: a later refused value in the
    same call (a child's ``k1``) undoes them with the rest."""
    _, a, b, _ = cranfield
    stage = Fuse(a, b, method="wsum")
    before = (stage.fingerprint(), stage.k, stage.weights, stage.params)
    with pytest.raises(KolmError, match="k1"):
        stage.set_params(**change, s0__k1=-1.0)
    assert (stage.fingerprint(), stage.k, stage.weights, stage.params) == before


def test_params_read_from_the_stage_are_a_copy(cranfield: Any) -> None:
    """Writing into what ``get_params``/``settings`` return (a NaN gamma, a table of text) does not
    reach the stage past its checks: set_params is the way in."""
    _, a, b, queries = cranfield
    stage = Fuse(a, b, method="posfuse", params={"probs": [[0.5, 0.25], [0.4]]}, weights=[1.0, 2.0])
    before = (stage.fingerprint(), repr(stage))
    got = stage.get_params()
    got["params"]["probs"][0][0] = "text"
    got["params"]["probs"].append([1.0])
    got["weights"][0] = float("nan")
    stage.settings()["params"]["probs"][1][0] = float("nan")
    assert (stage.fingerprint(), repr(stage)) == before
    assert stage.params == {"probs": [[0.5, 0.25], [0.4]]} and stage.weights == [1.0, 2.0]


def test_equal_fusions_have_one_fingerprint_and_repr(cranfield: Any) -> None:
    """params left empty once k/weights are taken out (fit_fusion's rrf and wsum) are no params,
    and their order does not count: equal fusions share their outputs in an experiment."""
    _, a, b, _ = cranfield
    pairs = [(Fuse(a, b, k=10), Fuse(a, b, params={"k": 10})),
             (Fuse(a, b, method="wsum", weights=[2.0, 1.0]), Fuse(a, b, method="wsum", params={"weights": [2.0, 1.0]})),
             (Fuse(a, b), Fuse(a, b, params={})),
             (Fuse(a, b, method="slidefuse", params={"probs": [[0.5], [0.2]], "w": 1}),
              Fuse(a, b, method="slidefuse", params={"w": 1, "probs": [[0.5], [0.2]]}))]
    for one, other in pairs:
        assert one.fingerprint() == other.fingerprint() and repr(one) == repr(other)
        assert one.get_params()["params"] == other.get_params()["params"]


def test_unknown_parameter_names_of_mixed_types_are_refused_by_name() -> None:
    a, b = ListRetriever(scored(["x"], [1.0])), ListRetriever(scored(["y"], [1.0]))
    with pytest.raises(KolmError, match=r"takes no parameter \[1, 'x'\]"):
        CompositeRetriever([a, b], method="rbc", params={1: 2, "x": 3, "phi": 0.5})
    with pytest.raises(KolmError, match=r"takes no parameter \[None, 'x'\]"):
        fuse([as_run(scored(["x"], [1.0]))], "rbc", params={None: 2, "x": 3, "phi": 0.5})


def test_a_k_in_params_that_is_not_a_number_is_refused_whatever_the_argument() -> None:
    a = ListRetriever(scored(["x"], [1.0]))
    for k in (60, 30):
        with pytest.raises(KolmError, match="k must be"):
            CompositeRetriever([a, a], k=k, params={"k": np.array([1.0, 2.0])})


async def test_segfuse_on_documents_without_scores_is_refused_naming_the_child() -> None:
    """segfuse reads the scores (P[k] * (v + 1)): a list without them is refused, as for wsum,
    not fused as if every score were 0."""
    from kolm_search import SearchDocument, SearchError

    unscored = [SearchDocument(id=i, content=i) for i in "abc"]
    comp = CompositeRetriever([ListRetriever(scored(list("bcd"), [3.0, 2.0, 1.0])), ListRetriever(unscored)],
                              method="segfuse", params={"probs": [[0.5, 0.2], [0.4, 0.1]]})
    with pytest.raises(SearchError, match=r"retrievers\[1\].*without a score.*segfuse"):
        await comp.retrieve(ctx(5))


def test_a_best_effort_fusion_missing_a_child_is_not_cached(cranfield: Any, tmp_path: Any) -> None:
    """A stage down during one experiment: the fusion without it is that run's answer, not the
    cached answer of every later experiment (with the stage back, it is fused again), nor is
    anything made from it (a cutoff of it, a second pipeline)."""
    from kolm_search import as_stage
    from kolm_search.evaluation import Experiment

    ds, a, b, queries = cranfield
    down = [True]
    tables = {"probs": [[0.9, 0.5, 0.1], [0.3, 0.6, 0.2]]}

    def pipelines() -> dict[str, Any]:
        fused = Fuse(as_stage(FlakyShard(a, down)), b % 50, method="posfuse", params=tables, strategy="best-effort")
        return {"f": fused, "f30": fused % 30}

    runs = []
    for is_down in (True, False):
        down[0] = is_down
        exp = Experiment(pipelines(), ds, ["ndcg@10"], cache_dir=tmp_path, progress=False)
        exp.run_pipelines()
        runs.append({name: exp.runs[name] for name in ("f", "f30")})
    whole = Fuse(as_stage(FlakyShard(a, down)), b % 50, method="posfuse", params=tables)(queries, limit=100)
    alone = Fuse(b % 50, method="posfuse", params={"probs": [tables["probs"][1]]})(queries, limit=100)
    assert len(runs[0]["f"]) == len(alone) < len(whole)
    assert len(runs[1]["f"]) == len(whole)
    top = whole[whole["rank"] < 30]
    cut = runs[1]["f30"]  # the cut of the complete fusion, not of the one read back from the first experiment
    assert sorted(zip(cut["qid"], cut["doc_id"])) == sorted(zip(top["qid"], top["doc_id"]))
    down[0] = True
    again = Experiment(pipelines(), ds, ["ndcg@10"], cache_dir=tmp_path, progress=False)
    again.run_pipelines()  # the complete fusion, cached when it was made, is read back
    assert len(again.runs["f"]) == len(whole) and not again.shared.computed


@pytest.mark.parametrize("batch", [True, False])
def test_a_clients_best_effort_fusion_missing_a_child_is_not_cached(cranfield: Any, tmp_path: Any,
                                                                    batch: bool) -> None:
    """The same for a SearchClient pipeline (its run cached by name), on the batch path and
    on the documents path."""
    from kolm_search import DefaultQueryPlanner, SearchClient
    from kolm_search.contract.client import SearchPipelineModules
    from kolm_search.evaluation import Experiment

    ds, a, b, queries = cranfield

    class Flaky:
        down = True
        table = a.table

        def retrieve(self, context: Any) -> Any:
            if Flaky.down:
                raise RuntimeError("shard down")
            return a.retrieve(context)

        def retrieve_batch(self, batch: Any) -> Any:
            if Flaky.down:
                raise RuntimeError("shard down")
            return a.retrieve_batch(batch)

    if not batch:
        del Flaky.retrieve_batch, Flaky.table
    tables = {"probs": [[0.9, 0.5, 0.1], [0.3, 0.6, 0.2]]}

    def client() -> Any:
        comp = CompositeRetriever([Flaky(), b], method="posfuse", params=tables, strategy="best-effort")
        return SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=comp))

    runs = []
    for down in (True, False):
        Flaky.down = down
        exp = Experiment({"c": client()}, ds, ["ndcg@10"], cache_dir=tmp_path, progress=False, limit=20)
        exp.run_pipelines()
        runs.append(exp.runs["c"].reset_index(drop=True))
    want = Experiment({"c": client()}, ds, ["ndcg@10"], progress=False, limit=20)  # the shard up, no cache
    want.run_pipelines()
    assert not runs[0]["doc_id"].equals(want.runs["c"]["doc_id"].reset_index(drop=True))
    pd.testing.assert_frame_equal(runs[1], want.runs["c"].reset_index(drop=True))


def test_a_measure_table_of_a_degraded_fusion_is_not_cached(cranfield: Any, tmp_path: Any) -> None:
    """``exp.run()`` with a best-effort fusion whose child failed: its runs are not cached, nor is
    the measure table made from them (the table, read back after the child came back, gave the
    degraded fusion's scores)."""
    from kolm_search import as_stage
    from kolm_search.evaluation import Experiment

    ds, a, b, _ = cranfield
    down = [True]

    def pipelines() -> dict[str, Any]:
        fused = Fuse(as_stage(FlakyShard(a, down, "flaky-bm25-table")), b % 50, method="rrf", strategy="best-effort")
        return {"f": fused, "b": b % 50}

    tables = []
    for is_down in (True, False):
        down[0] = is_down
        exp = Experiment(pipelines(), ds, ["ndcg@10"], cache_dir=tmp_path, progress=False)
        tables.append(exp.run())
        assert exp.table_cache is not None
        assert (exp.table_cache.reads, exp.table_cache.writes) == ((0, 0) if is_down else (0, 1))
    fresh = Experiment(pipelines(), ds, ["ndcg@10"], progress=False).run()  # the shard up, no cache
    assert tables[1]["mean"].tolist() == fresh["mean"].tolist() != tables[0]["mean"].tolist()
