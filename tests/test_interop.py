"""Runs and qrels in peers' shapes: every form in gives the native call's numbers exactly (the
oracles: the same call on our frame, and pytrec_eval), every form out is read back by its tool."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import (
    FrameValidationError,
    KolmTypeError,
    KolmValueError,
    compare,
    evaluate,
    fuse,
    read_qrels,
    read_run,
)
from kolm_search.engine.interop import table_of, to_ir_measures, to_pyterrier, to_ranx, to_trec_dict
from kolm_search.evaluation import optimize_fusion

METRICS = ["ndcg@10", "map", "mrr", "precision@5", "recall@10", "bpref"]
TREC = {"ndcg@10": "ndcg_cut_10", "map": "map", "mrr": "recip_rank", "precision@5": "P_5", "recall@10": "recall_10",
        "bpref": "bpref"}

Scored = namedtuple("Scored", ["query_id", "doc_id", "score"])
Judged = namedtuple("Judged", ["query_id", "doc_id", "relevance", "iteration"])


def _renamed(frame: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """The peer's frame written by hand (independent of the code under test)."""
    return frame.rename(columns=names)


def _nested(frame: pd.DataFrame, value: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for q, d, v in frame[["qid", "doc_id", value]].itertuples(index=False, name=None):
        out.setdefault(str(q), {})[str(d)] = v
    return out


def run_forms() -> dict[str, Callable[[pd.DataFrame], Any]]:
    forms: dict[str, Callable[[pd.DataFrame], Any]] = {
        "native": lambda r: r,
        "pyterrier": lambda r: _renamed(r, {"doc_id": "docno"}).assign(docid=np.arange(len(r)), query="text"),
        "ir_measures": lambda r: _renamed(r, {"qid": "query_id"}),
        "ranx frame": lambda r: _renamed(r, {"qid": "q_id"}),
        "nested": lambda r: _nested(r, "score"),
        "namedtuples": lambda r: [Scored(*t) for t in r[["qid", "doc_id", "score"]].itertuples(index=False, name=None)],
        "pyarrow": lambda r: __import__("pyarrow").Table.from_pandas(r, preserve_index=False),
        "pyarrow batch": lambda r: __import__("pyarrow").RecordBatch.from_pandas(r, preserve_index=False),
    }
    try:
        import ranx

        forms["ranx"] = lambda r: ranx.Run(_nested(r, "score"))
    except ImportError:
        pass
    try:
        import polars as pl

        forms["polars"] = lambda r: pl.from_pandas(r)
        forms["polars lazy"] = lambda r: pl.from_pandas(r).lazy()
    except ImportError:
        pass
    return forms


def qrels_forms() -> dict[str, Callable[[pd.DataFrame], Any]]:
    forms: dict[str, Callable[[pd.DataFrame], Any]] = {
        "native": lambda j: j,
        "pyterrier": lambda j: _renamed(j, {"doc_id": "docno", "relevance": "label"}),
        "ir_measures": lambda j: _renamed(j, {"qid": "query_id"}).assign(iteration="0"),
        "ranx frame": lambda j: _renamed(j, {"qid": "q_id", "relevance": "score"}),
        "beir tsv": lambda j: _renamed(j, {"qid": "query-id", "doc_id": "corpus-id", "relevance": "score"}),
        "nested": lambda j: _nested(j, "relevance"),
        "ir_datasets records": lambda j: [Judged(q, d, int(v), "0") for q, d, v in
                                          j[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None)],
        "pyarrow": lambda j: __import__("pyarrow").Table.from_pandas(j, preserve_index=False),
    }
    try:
        import ranx

        forms["ranx"] = lambda j: ranx.Qrels(_nested(j, "relevance"))
    except ImportError:
        pass
    try:
        import polars as pl

        forms["polars"] = lambda j: pl.from_pandas(j)
    except ImportError:
        pass
    return forms


RUN_FORMS = run_forms()
QRELS_FORMS = qrels_forms()

docs = st.sampled_from([f"d{i}" for i in range(12)] + ["10", "9", "é"])
run_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "3"]), docs,
                              st.sampled_from([0.0, 1.0, 1.0000001, 2.5, -1.0, 3.0])), min_size=1, max_size=50)
qrel_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "3"]), docs, st.integers(0, 3)), min_size=1, max_size=30)


def _frames(rrows: list[Any], qrows: list[Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    run = pd.DataFrame(rrows, columns=["qid", "doc_id", "score"]).drop_duplicates(["qid", "doc_id"]).reset_index(drop=True)
    qrels = pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]).drop_duplicates(["qid", "doc_id"])
    return run, qrels.reset_index(drop=True)


def _pytrec(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, dict[str, float]]:
    ev = pytrec_eval.RelevanceEvaluator(_nested(qrels, "relevance"), {"ndcg_cut.10", "map", "recip_rank", "P.5",
                                                                      "recall.10", "bpref"})
    return ev.evaluate({q: {d: float(s) for d, s in v.items()} for q, v in _nested(run, "score").items()})


@pytest.mark.slow  # every peer's form, ranx and polars among them: ~22 s
@settings(max_examples=10, deadline=None)
@given(run_rows, qrel_rows)
def test_every_form_in_gives_the_native_numbers(rrows: list[Any], qrows: list[Any]) -> None:
    run, qrels = _frames(rrows, qrows)
    native = evaluate(run, qrels, METRICS, per_query=True)
    assert isinstance(native, pd.DataFrame)
    want = _pytrec(run, qrels)
    assert sorted(native["qid"]) == sorted(want)
    for row in native.itertuples(index=False):
        for m in METRICS:
            assert abs(row[1 + METRICS.index(m)] - want[row.qid][TREC[m]]) <= 1e-12, (row.qid, m)
    for rname, rform in RUN_FORMS.items():
        got = evaluate(rform(run), qrels, METRICS, per_query=True)
        pd.testing.assert_frame_equal(got, native, check_exact=True, obj=rname)
    for jname, jform in QRELS_FORMS.items():
        got = evaluate(run, jform(qrels), METRICS, per_query=True)
        pd.testing.assert_frame_equal(got, native, check_exact=True, obj=jname)


def _distinct_runs(seed: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(2):
        rows = [(f"q{q}", f"d{d}") for q in range(4) for d in rng.choice(20, size=8, replace=False)]
        frame = pd.DataFrame(rows, columns=["qid", "doc_id"])
        frame["score"] = rng.permutation(len(frame)).astype(np.float64) / 7.0  # distinct scores
        runs.append(frame)
    return runs


@pytest.mark.parametrize("method", ["rrf", "combsum", "combmnz"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fuse_takes_every_form(method: str, seed: int) -> None:
    runs = _distinct_runs(seed)
    native = fuse(runs, method=method, k=10)
    for name, form in RUN_FORMS.items():
        got = fuse([form(r) for r in runs], method=method, k=10)
        np.testing.assert_array_equal(got["score"].to_numpy(), native["score"].to_numpy(), err_msg=name)
        assert list(got["doc_id"].astype(str)) == list(native["doc_id"].astype(str)), name
        assert list(got["qid"].astype(str)) == list(native["qid"].astype(str)), name


def test_compare_and_optimize_take_peer_forms() -> None:
    runs = _distinct_runs(3)
    rng = np.random.default_rng(3)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(rng.integers(0, 3))) for q in range(4) for d in range(0, 20, 3)],
                         columns=["qid", "doc_id", "relevance"])
    native = compare({"a": runs[0], "b": runs[1]}, qrels, ["ndcg@10", "map"])
    for rname, rform in RUN_FORMS.items():
        for jname in ("pyterrier", "ranx", "ir_datasets records"):
            if jname not in QRELS_FORMS:
                continue
            got = compare({"a": rform(runs[0]), "b": rform(runs[1])}, QRELS_FORMS[jname](qrels), ["ndcg@10", "map"])
            pd.testing.assert_frame_equal(pd.DataFrame(got), pd.DataFrame(native), obj=f"{rname}/{jname}")
    best = optimize_fusion({"a": runs[0], "b": runs[1]}, qrels, "ndcg@10", grid={"k": [1, 60]}, queries=["q0", "q1"])
    peer = optimize_fusion({"a": RUN_FORMS["ir_measures"](runs[0]), "b": RUN_FORMS["pyterrier"](runs[1])},
                           QRELS_FORMS["pyterrier"](qrels), "ndcg@10", grid={"k": [1, 60]}, queries=["q0", "q1"])
    assert (best["k"], best["weights"], best["score"]) == (peer["k"], peer["weights"], peer["score"])


@pytest.mark.slow  # every peer's tool on every form: ~19 s
@settings(max_examples=8, deadline=None)
@given(run_rows, qrel_rows)
def test_forms_out_round_trip_and_their_tools_agree(rrows: list[Any], qrows: list[Any]) -> None:
    run, qrels = _frames(rrows, qrows)
    native = evaluate(run, qrels, METRICS, per_query=True)
    for out in (to_pyterrier, to_ir_measures, to_trec_dict, to_ranx):
        if out is to_ranx:
            pytest.importorskip("ranx")
        got = evaluate(out(run), out(qrels), METRICS, per_query=True)
        pd.testing.assert_frame_equal(got, native, check_exact=True, obj=out.__name__)
    pt = to_pyterrier(run)
    assert list(pt.columns) == ["qid", "docno", "score", "rank"]
    for _, group in pt.groupby("qid"):  # PyTerrier's ranks: 0, 1, ... in descending score order
        assert list(group["rank"]) == list(range(len(group)))
        assert group["score"].is_monotonic_decreasing
    assert list(to_pyterrier(qrels).columns) == ["qid", "docno", "label"]
    assert list(to_ir_measures(run).columns) == ["query_id", "doc_id", "score"]
    assert list(to_ir_measures(qrels).columns) == ["query_id", "doc_id", "relevance"]
    # pytrec_eval reads to_trec_dict as it is
    ev = pytrec_eval.RelevanceEvaluator(to_trec_dict(qrels), {"map"})
    want = ev.evaluate(to_trec_dict(run))
    for row in native.itertuples(index=False):
        assert abs(row.map - want[row.qid]["map"]) <= 1e-12


def test_ir_measures_and_ranx_read_what_we_write() -> None:
    runs = _distinct_runs(5)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", 1 + (d % 2)) for q in range(4) for d in range(0, 20, 4)],
                         columns=["qid", "doc_id", "relevance"])
    ours = evaluate(runs[0], qrels, ["ndcg@10", "map"])
    assert isinstance(ours, dict)
    ir_measures = pytest.importorskip("ir_measures")
    theirs = ir_measures.calc_aggregate([ir_measures.nDCG @ 10, ir_measures.AP], to_ir_measures(qrels), to_ir_measures(runs[0]))
    assert abs(theirs[ir_measures.nDCG @ 10] - ours["ndcg@10"]) <= 1e-12
    assert abs(theirs[ir_measures.AP] - ours["map"]) <= 1e-12
    ranx = pytest.importorskip("ranx")
    r, q = to_ranx(runs[0], name="bm25"), to_ranx(qrels)
    assert isinstance(r, ranx.Run) and isinstance(q, ranx.Qrels) and r.name == "bm25"
    assert r.to_dict() == to_trec_dict(runs[0]) and q.to_dict() == to_trec_dict(qrels)


def test_errors_name_what_was_found_and_what_is_accepted() -> None:
    run = pd.DataFrame({"query": ["1"], "document": ["a"], "score": [1.0]})
    with pytest.raises(FrameValidationError) as info:
        evaluate(run, {"1": {"a": 1}})
    text = str(info.value)
    for name in ("'query'", "'document'", "qid", "query_id", "q_id", "docno", "doc_id"):
        assert name in text, name
    qrels = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "relevance": [1], "label": [0]})
    with pytest.raises(FrameValidationError, match="relevance.*label"):
        evaluate({"1": {"a": 1.0}}, qrels)
    both = pd.DataFrame({"qid": ["1"], "query_id": ["2"], "doc_id": ["a"], "score": [1.0]})
    with pytest.raises(FrameValidationError, match="qid.*query_id"):
        evaluate(both, qrels.drop(columns="label"))
    with pytest.raises(KolmTypeError, match="DataFrame"):
        evaluate(object(), qrels)
    with pytest.raises(KolmTypeError, match="nested dicts"):
        evaluate({"1": [("a", 1.0)]}, qrels)
    with pytest.raises(FrameValidationError, match="empty"):
        table_of([], "run")
    with pytest.raises(FrameValidationError, match="item 1"):
        table_of([Scored("1", "a", 1.0), ("1", "b", 2.0)], "run")
    with pytest.raises(KolmValueError, match="kind"):
        to_trec_dict(qrels.drop(columns="label"), kind="both")  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="kind="):
        to_pyterrier(pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0], "label": [1]}))
    dup = pd.DataFrame({"query_id": ["1", "1"], "doc_id": ["a", "a"], "score": [1.0, 2.0]})
    with pytest.raises(FrameValidationError, match="twice"):
        to_trec_dict(dup)  # a dict would keep one silently


def test_native_frame_is_not_copied_and_peer_frame_is_not_mutated() -> None:
    run = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0]})
    assert table_of(run, "run") is run
    peer = run.rename(columns={"doc_id": "docno"})
    out = table_of(peer, "run")
    assert list(out.columns) == ["qid", "doc_id", "score"] and list(peer.columns) == ["qid", "docno", "score"]


def test_parquet_files_in_peer_names(tmp_path: Path) -> None:
    run = pd.DataFrame({"query_id": ["1", "1"], "doc_id": ["a", "b"], "score": [2.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["1"], "docno": ["b"], "label": [2]})
    run.to_parquet(tmp_path / "run.parquet")
    qrels.to_parquet(tmp_path / "qrels.parquet")
    got_run, got_qrels = read_run(tmp_path / "run.parquet"), read_qrels(tmp_path / "qrels.parquet")
    assert list(got_run.columns) == ["qid", "doc_id", "score"] and list(got_qrels.columns) == ["qid", "doc_id", "relevance"]
    assert evaluate(got_run, got_qrels, ["mrr"]) == {"mrr": 0.5}
