"""An experiment's stage pipelines kept as codes (``compose.queries.CodedRun``), their
DataFrames made when asked for (``evaluation.experiment.Runs``), and their runs cached as codes
(``compose.run_cache.RunCache``). Oracles: ``search_batch`` of a ``SearchClient`` with the same
pipeline as retriever (the run without any experiment, cache or coded form), ``compare`` and
``evaluate`` of those runs, and ``drop_self_hits`` of a run one document deeper."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, DefaultQueryPlanner, Experiment, SearchClient, compare, evaluate
from kolm_search.compose.queries import CodedRun
from kolm_search.evaluation.experiment import Runs
from kolm_search.evaluation.self_hits import drop_self_hits
from tests.fakes import Prior, judged_cranfield

METRICS = ["ndcg@10", "map", "recall@20"]


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    return judged_cranfield(40)


def _pipes(corpus: pd.DataFrame) -> dict[str, Any]:
    bm25 = BM25Retriever(corpus)
    first = bm25 % 30
    return {"bm25": bm25, **{f"prior{w}": first >> Prior(w) for w in (0.5, 1.0, 2.0)}}


def _plain(pipe: Any, queries: pd.DataFrame, limit: int, drop: bool) -> pd.DataFrame:
    """The run as ``search_batch`` makes it, outside any experiment (self-hits dropped from one deeper)."""
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": pipe})
    if not drop:
        return client.search_batch(queries, limit=limit).run
    return drop_self_hits(client.search_batch(queries, limit=limit + 1).run, limit)[0]


@pytest.mark.parametrize(("drop", "qids"), [(False, "str"), (True, "str"), (False, "int")])
def test_runs_made_when_asked_equal_search_batch_first_and_from_the_cache(ds, tmp_path: Path, drop: bool,  # type: ignore[no-untyped-def]
                                                                           qids: str) -> None:
    if qids == "int":  # (a run read from the cache takes the qids as the queries DataFrame holds them)
        ds = copy.copy(ds)
        ds.queries = ds.queries.assign(qid=ds.queries["qid"].astype(int))
        ds.qrels = ds.qrels.assign(qid=ds.qrels["qid"].astype(int))
        assert ds.judged_queries()["qid"].dtype == np.int64
    pipes = _pipes(ds.corpus)
    queries = ds.judged_queries()
    plain = {name: _plain(pipe, queries, 20, drop) for name, pipe in pipes.items()}
    for cache in (None, tmp_path, tmp_path):  # no cache; a first run that fills it; a second that reads it
        exp = Experiment(pipes, ds, METRICS, limit=20, progress=False, cache_dir=cache, drop_self_hits=drop)
        runs = exp.run_pipelines()
        assert isinstance(runs, Runs) and list(runs) == list(pipes) and len(runs) == len(pipes)
        for name in pipes:  # kept as codes until asked for (with self-hits to drop: as codes and a cut)
            assert runs.coded(name) is None if drop else isinstance(runs.coded(name), CodedRun)
        for name in pipes:
            got = runs[name]
            pd.testing.assert_frame_equal(got, plain[name], check_dtype=False)
            assert list(got.dtypes) == [pd.StringDtype(na_value=np.nan) if qids == "str" else np.dtype(object),
                                        pd.StringDtype(na_value=np.nan), np.dtype(np.int64), np.dtype(np.float64)]
            assert runs[name] is got and runs.coded(name) is None  # made once, then kept
        if cache is not None and exp.run_cache is not None and exp.run_cache.reads:
            assert exp.run_cache.reads == len(pipes) and not exp.shared.computed


def test_an_experiments_table_equals_compare_and_evaluate_of_the_plain_runs(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipes = _pipes(ds.corpus)
    queries = ds.judged_queries()
    plain = {name: _plain(pipe, queries, 20, False) for name, pipe in pipes.items()}
    want = compare(plain, ds.qrels, METRICS)
    for cache in (tmp_path, tmp_path):
        exp = Experiment(pipes, ds, METRICS, limit=20, progress=False, cache_dir=cache, drop_self_hits=False)
        got = exp.run()
        pd.testing.assert_frame_equal(pd.DataFrame(got), pd.DataFrame(want))
        for name, run in plain.items():
            assert evaluate(exp.runs[name], ds.qrels, METRICS) == evaluate(run, ds.qrels, METRICS)


def test_runs_is_a_mapping_of_dataframes(ds) -> None:  # type: ignore[no-untyped-def]
    pipes = _pipes(ds.corpus)
    exp = Experiment(pipes, ds, METRICS, limit=5, progress=False, drop_self_hits=False)
    runs = exp.run_pipelines()
    assert "bm25" in runs and "other" not in runs
    with pytest.raises(KeyError):
        runs["other"]
    frame = pd.DataFrame({"qid": ["1"], "doc_id": ["1"], "rank": [0], "score": [1.0]})
    runs["prior0.5"] = frame  # a DataFrame set over a coded run replaces it, in its place
    assert runs["prior0.5"] is frame and runs.coded("prior0.5") is None and list(runs) == list(pipes)
    del runs["bm25"]
    assert list(runs) == ["prior0.5", "prior1.0", "prior2.0"] and len(runs) == 3
    with pytest.raises(KeyError):
        del runs["bm25"]
    exp.run_pipelines()  # a pipeline whose run was removed runs again, at the end
    assert list(runs) == ["prior0.5", "prior1.0", "prior2.0", "bm25"]
    pd.testing.assert_frame_equal(runs["bm25"], _plain(pipes["bm25"], ds.judged_queries(), 5, False),
                                  check_dtype=False)
    assert dict(runs).keys() == set(runs)


def test_runs_sharing_columns_copy_them_when_one_is_written_to(ds) -> None:  # type: ignore[no-untyped-def]
    pipes = _pipes(ds.corpus)
    exp = Experiment(pipes, ds, METRICS, limit=20, progress=False, drop_self_hits=False)
    runs = exp.run_pipelines()
    a, b = runs["prior0.5"], runs["prior1.0"]
    want = b.copy(deep=True)
    # each run's ranks its own (a write through .array, unseen by copy on write, would reach the other)
    assert not np.shares_memory(a["rank"].to_numpy(), b["rank"].to_numpy())
    a.loc[0, "rank"] = 99
    a.iloc[1, 0] = "changed"
    a["score"] *= 2
    pd.testing.assert_frame_equal(b, want)
    pd.testing.assert_frame_equal(runs["prior2.0"], _plain(pipes["prior2.0"], ds.judged_queries(), 20, False),
                                  check_dtype=False)


def test_a_coded_runs_arrays_are_read_only(ds) -> None:  # type: ignore[no-untyped-def]
    # two equal pipelines share one coded run's arrays (and the stage output kept): none is written through
    first = BM25Retriever(ds.corpus) % 10
    exp = Experiment({"a": first, "b": first}, ds, METRICS, limit=10, progress=False, drop_self_hits=False)
    exp.run_pipelines()
    coded = exp.runs.coded("a")
    assert coded is not None
    for part in coded.parts:
        for values in part[1:]:
            with pytest.raises(ValueError, match="read-only"):
                values[:1] = 0
    pd.testing.assert_frame_equal(exp.runs["b"], first(ds.judged_queries(), limit=10))
