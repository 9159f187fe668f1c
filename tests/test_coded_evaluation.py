"""An experiment's stage pipelines measured from their codes (``evaluation.coded_runs``), without
making their run DataFrames. Oracles: ``evaluate`` of the DataFrame the run makes (the same floats,
every measure, ties, self-hits cut and dropped, unjudged documents, queries without judgements,
judged documents the table lacks, errors alike), pytrec_eval on the same run, and ``compare`` of
runs made outside any experiment (Cranfield, in memory and memory-mapped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import (
    BM25Retriever,
    DefaultQueryPlanner,
    Experiment,
    KolmError,
    SearchClient,
    compare,
    evaluate,
)
from kolm_search.compose.queries import CodedRun, PreparedQueries, prepare_queries, run_coded
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.mapped_table import MappedDocumentTable, write_documents
from kolm_search.evaluation.experiment_runs import Runs
from kolm_search.evaluation.self_hits import drop_self_hits
from kolm_search.io import load_dataset
from tests.fakes import Prior

#: every measure the kernel computes, in several forms (cutoffs, rel=, judged_only=, gains=)
NATIVE = ["ndcg@10", "nDCG", "AP", "map@5", "RR", "RR@3", "P@5", "P(rel=2)@5", "R@10", "Rprec", "Success@3", "Bpref",
          "Judged@5", "NumRet", "NumRelRet", "NumRel", "ERR@10", "RBP(p=0.8,rel=1)", "infAP", "iprec_at_recall_0.10",
          "11pt_avg", "set_P", "set_recall", "SetF(beta=2)", "set_map", "set_relative_P", "R_cap@5",
          "Rprec_mult_0.20", "utility", "gm_map", "gm_bpref", "num_q", "num_nonrel_judged_ret", "binG", "G",
          "ndcg_rel", "Rndcg", "DCG@5", "nDCG(dcg='exp-log2')@5", "AP(judged_only=True)",
          "nDCG(gains={0:0,1:1,2:5,3:10})@5"]
DOCS = [f"d{i}" for i in range(10)] + ["D1", "é", "10", "q1"]  # "10" and "q1" are also query ids
QIDS = ["q1", "q2", "q3", 10, "q5"]


def _table() -> DocumentTable:
    return DocumentTable(pd.DataFrame({"id": DOCS, "content": [f"text {i}" for i in range(len(DOCS))]}))


@st.composite
def coded_runs(draw: Any) -> tuple[CodedRun, pd.DataFrame]:
    """A coded run over a few queries (str and int ids; 10 also as "10" sometimes, which the
    DataFrame path merges), tie-heavy scores, one or two parts; and qrels with unjudged, absent
    and negative-grade documents, and queries the run lacks."""
    qids = draw(st.lists(st.sampled_from([*QIDS, "10"]), min_size=1, max_size=5, unique=True))
    table = _table()
    parts = []
    groups = draw(st.sampled_from([1, 2])) if len(qids) > 1 else 1
    for g in range(groups):
        q, doc, rank, score = [], [], [], []
        for row in range(g, len(qids), groups):
            docs = draw(st.lists(st.integers(0, len(DOCS) - 1), max_size=8, unique=True))
            for r, d in enumerate(docs):
                q.append(row)
                doc.append(d)
                rank.append(r)
                score.append(draw(st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.0, 1.0 + 1e-12])))
        parts.append((None if groups == 1 else g, np.asarray(q, np.int64), np.asarray(doc, np.int64),
                      np.asarray(rank, np.int32), np.asarray(score, np.float64)))
    run = CodedRun(PreparedQueries(qids, []), table, parts)
    rows = draw(st.lists(st.tuples(st.sampled_from([*QIDS, "q9"]), st.sampled_from([*DOCS, "absent", "gone"]),
                                   st.integers(-1, 3)), min_size=1, max_size=30))
    qrels = pd.DataFrame(rows, columns=["qid", "doc_id", "relevance"])
    qrels = qrels[~qrels[["qid", "doc_id"]].astype(str).duplicated()].reset_index(drop=True)
    return run, qrels


def _oracle_frame(run: CodedRun, limit: int | None) -> pd.DataFrame:
    frame = run.frame()
    return frame if limit is None else drop_self_hits(frame, limit)[0]


def _both(run: CodedRun, qrels: pd.DataFrame, metrics: list[str], limit: int | None, **kw: Any) -> Any:
    """(coded, oracle): each a per-query table or the (type, message) of the error raised."""
    runs = Runs()
    runs.set_coded("run", run, limit)
    try:
        got: Any = runs.evaluate(qrels, metrics, **kw)["run"]
    except KolmError as exc:
        got = (type(exc), str(exc))
    try:
        want: Any = evaluate(_oracle_frame(run, limit), qrels, metrics, per_query=True, **kw)
    except KolmError as exc:
        want = (type(exc), str(exc))
    return runs, got, want


@settings(max_examples=150, deadline=None)
@given(coded_runs(), st.sampled_from([None, 1, 2, 4]), st.booleans(), st.integers(1, 3), st.booleans(),
       st.sampled_from(["ignore", "zero"]))
def test_random_coded_runs_equal_evaluate_of_their_dataframes(case: tuple[CodedRun, pd.DataFrame], limit: int | None,
                                                              drop: bool, level: int, judged_only: bool,
                                                              missing: str) -> None:
    run, qrels = case
    runs, got, want = _both(run, qrels, NATIVE, limit, drop_self_hits=drop, relevance_level=level,
                            judged_only=judged_only, missing=missing)
    if isinstance(want, tuple):
        assert got == want
        return
    assert list(got["qid"]) == list(want["qid"])  # (the dtype of an empty run's DataFrame is object)
    pd.testing.assert_frame_equal(got.drop(columns="qid"), want.drop(columns="qid"), check_exact=True)
    distinct = len({str(q) for q in run.prepared.qids}) == len(run.prepared.qids)
    if limit is None and distinct:  # measured from the codes: no DataFrame was made
        assert runs.coded("run") is run


@pytest.mark.parametrize("limit", [None, 1, 2])
@pytest.mark.parametrize("missing", ["ignore", "zero"])
def test_self_hits_cut_and_dropped_as_from_the_dataframe(limit: int | None, missing: str) -> None:
    """Query q1 retrieves only itself (left without rows: scored 0 when dropped), query 10
    retrieves "10" second of three (int and str ids compared as strings), q2 none of its own."""
    doc = {d: i for i, d in enumerate(DOCS)}
    q = np.array([0, 1, 1, 1, 2, 2])
    docs = np.array([doc["q1"], doc["d1"], doc["10"], doc["d2"], doc["q1"], doc["d3"]])
    run = CodedRun(PreparedQueries(["q1", 10, "q2"], []), _table(),
                   [(None, q, docs, np.array([0, 0, 1, 2, 0, 1]), np.array([3.0, 2.0, 2.0, 1.0, 1.0, 1.0]))])
    qrels = pd.DataFrame({"qid": ["q1", "10", "10", "q2", "q2"], "doc_id": ["d0", "d2", "10", "q1", "d3"],
                          "relevance": [1, 1, 2, 1, 1]})
    for drop in (False, True):
        runs, got, want = _both(run, qrels, ["ndcg@10", "AP", "P@2", "NumRet"], limit, drop_self_hits=drop,
                                missing=missing)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        if limit is None:
            assert runs.coded("run") is run
    assert evaluate(run.frame(), qrels, ["NumRet"], per_query=True, drop_self_hits=True)["NumRet"].tolist() == [2, 0, 2]


def test_a_run_holding_a_document_twice_is_refused_as_evaluate_refuses_it() -> None:
    table = _table()
    run = CodedRun(PreparedQueries(["q2", "q3"], []), table,
                   [(None, np.array([0, 1, 1]), np.array([4, 5, 5]), np.array([0, 0, 1]), np.array([1.0, 2.0, 1.0]))])
    qrels = pd.DataFrame({"qid": ["q3"], "doc_id": ["d5"], "relevance": [1]})
    _, got, want = _both(run, qrels, ["ndcg@10"], None)
    assert isinstance(want, tuple) and "duplicate document for query 'q3'" in want[1]
    assert got == want


def test_nan_scores_are_refused_by_the_dataframe_path_with_its_row() -> None:
    run = CodedRun(PreparedQueries(["q2"], []), _table(),
                   [(None, np.array([0, 0]), np.array([4, 5]), np.array([0, 1]), np.array([1.0, np.nan]))])
    qrels = pd.DataFrame({"qid": ["q2"], "doc_id": ["d5"], "relevance": [1]})
    _, got, want = _both(run, qrels, ["ndcg@10"], None)
    assert isinstance(want, tuple) and "row 1" in want[1] and got == want


def test_measures_through_ir_measures_and_diversity_measures_equal_evaluate() -> None:
    rng = np.random.default_rng(3)
    table = _table()
    q = np.repeat(np.arange(4), 8)
    doc = np.concatenate([rng.choice(len(DOCS), 8, replace=False) for _ in range(4)])
    run = CodedRun(PreparedQueries(["q1", "q2", "q3", "q5"], []), table,
                   [(None, q, doc, np.tile(np.arange(8), 4), np.round(rng.random(32), 1))])
    qrels = pd.DataFrame({"qid": np.repeat(["q1", "q2", "q3", "q9"], 6),
                          "doc_id": np.concatenate([rng.choice([*DOCS, "absent"], 6, replace=False) for _ in range(4)]),
                          "relevance": rng.integers(0, 3, 24)})
    _, got, want = _both(run, qrels, ["SDCG(max_rel=2)@10", "Compat(p=0.8)", "ndcg@5"], 5, judged_only=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    sub = pd.concat([qrels.assign(subtopic=1), qrels.assign(subtopic=2, relevance=1 - qrels["relevance"].clip(0, 1))])
    _, got, want = _both(run, sub, ["alpha_nDCG@5", "ERR_IA@5", "P@5"], None)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("seed", range(4))
def test_tables_too_large_for_a_per_document_array_are_searched(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``DENSE_DOCS`` documents, judged codes come from a sorted search and duplicates are
    told apart by the run's own documents: the same values."""
    from kolm_search.evaluation import coded_runs

    rng = np.random.default_rng(seed)
    n_q = 6
    q = np.repeat(np.arange(n_q), 9)
    docs = np.concatenate([rng.choice(len(DOCS), 9, replace=False) for _ in range(n_q)])
    if seed == 3:
        docs[1] = docs[0]  # a duplicate: the same error either way
    run = CodedRun(PreparedQueries([f"q{i}" for i in range(n_q)], []), _table(),
                   [(None, q, docs, np.tile(np.arange(9), n_q), rng.integers(0, 4, len(q)).astype(np.float64))])
    qrels = pd.DataFrame({"qid": [f"q{i}" for i in rng.integers(0, n_q + 2, 40)],
                          "doc_id": rng.choice([*DOCS, "absent"], 40), "relevance": rng.integers(-1, 4, 40)})
    qrels = qrels[~qrels[["qid", "doc_id"]].duplicated()]
    _, dense, want = _both(run, qrels, NATIVE, 5)
    monkeypatch.setattr(coded_runs, "DENSE_DOCS", 0)
    _, searched, _ = _both(run, qrels, NATIVE, 5)
    if seed == 3:
        assert isinstance(want, tuple) and dense == want and searched == want
        return
    pd.testing.assert_frame_equal(dense, want, check_exact=True)
    pd.testing.assert_frame_equal(searched, want, check_exact=True)


def _pytrec(frame: pd.DataFrame, qrels: pd.DataFrame, names: list[str], level: int) -> dict[str, dict[str, float]]:
    r: dict[str, dict[str, float]] = {}
    for qid, d, s in frame[["qid", "doc_id", "score"]].itertuples(index=False, name=None):
        r.setdefault(str(qid), {})[str(d)] = float(s)
    j: dict[str, dict[str, int]] = {}
    for qid, d, v in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None):
        j.setdefault(str(qid), {})[str(d)] = int(v)
    return pytrec_eval.RelevanceEvaluator(j, set(names), relevance_level=level).evaluate(r)


TREC = ["map", "ndcg_cut_10", "P_5", "recall_10", "recip_rank", "bpref", "Rprec", "ndcg", "infAP", "num_rel_ret",
        "iprec_at_recall_0.20", "set_F", "success_5"]


@settings(max_examples=60, deadline=None)
@given(coded_runs(), st.sampled_from([None, 2]), st.integers(1, 2))
def test_random_coded_runs_match_pytrec_eval(case: tuple[CodedRun, pd.DataFrame], limit: int | None,
                                             level: int) -> None:
    run, qrels = case
    qrels = qrels[qrels.groupby(qrels["qid"].astype(str))["relevance"].transform("max") >= 0]  # trec_eval skips those
    if qrels.empty or len({str(q) for q in run.prepared.qids}) != len(run.prepared.qids):
        return
    frame = _oracle_frame(run, limit)
    if frame.empty:
        return
    want = _pytrec(frame, qrels, TREC, level)
    runs = Runs()
    runs.set_coded("run", run, limit)
    got = runs.evaluate(qrels, TREC, relevance_level=level)["run"].set_index("qid")
    assert sorted(got.index) == sorted(want)
    for qid, values in want.items():
        for name in TREC:
            assert got.loc[qid, name] == pytest.approx(values[name], abs=1e-9), (qid, name)


@pytest.fixture(scope="module")
def cranfield():  # type: ignore[no-untyped-def]
    data = load_dataset("cranfield")
    keep = list(data.judged_queries()["qid"].iloc[:60])
    data.queries = data.queries[data.queries["qid"].isin(keep)].reset_index(drop=True)
    extra = pd.DataFrame({"qid": keep[:5], "doc_id": [f"not-in-corpus-{i}" for i in range(5)], "relevance": 2})
    data.qrels = pd.concat([data.qrels[data.qrels["qid"].isin(keep)], extra], ignore_index=True)
    data.qrels.attrs.update(load_dataset("cranfield").qrels.attrs)
    return data


CRANFIELD_MEASURES = ["ndcg@10", "AP", "R@20", "P@5", "RR", "Bpref", "Judged@10", "NumRelRet", "infAP", "Compat(p=0.8)"]


def _plain(pipe: Any, queries: pd.DataFrame, limit: int, drop: bool) -> pd.DataFrame:
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": pipe})
    if not drop:
        return client.search_batch(queries, limit=limit).run
    return drop_self_hits(client.search_batch(queries, limit=limit + 1).run, limit)[0]


def _pipes(first: BM25Retriever) -> dict[str, Any]:
    return {"bm25": first, **{f"prior{w}": (first % 30) >> Prior(w) for w in (0.5, 1.0, 2.0)}}


@pytest.mark.parametrize("drop", [False, True])
def test_an_experiments_table_equals_compare_of_runs_made_outside_it(cranfield, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                     drop: bool) -> None:
    pipes = _pipes(BM25Retriever(cranfield.corpus))
    queries = cranfield.judged_queries()
    plain = {name: _plain(pipe, queries, 20, drop) for name, pipe in pipes.items()}
    want = compare(plain, cranfield.qrels, CRANFIELD_MEASURES, drop_self_hits=drop)
    for cache in (None, tmp_path, tmp_path):  # computed; computed and cached; read from the cache
        exp = Experiment(pipes, cranfield, CRANFIELD_MEASURES, limit=20, progress=False, cache_dir=cache,
                         drop_self_hits=drop)
        got = exp.run()
        pd.testing.assert_frame_equal(pd.DataFrame(got), pd.DataFrame(want), check_exact=True)
        pd.testing.assert_frame_equal(got.curves, want.curves, check_exact=True)
        for metric in CRANFIELD_MEASURES:
            pd.testing.assert_frame_equal(got.per_query[metric], want.per_query[metric], check_exact=True)
        if not drop:  # measured from their codes: no run DataFrame was made
            assert all(isinstance(exp.runs.coded(name), CodedRun) for name in pipes)  # type: ignore[attr-defined]
        per_query = exp.per_query()
        for metric in CRANFIELD_MEASURES:
            pd.testing.assert_frame_equal(per_query[metric], want.per_query[metric], check_exact=True)


def test_runs_over_every_query_equal_evaluate_on_cranfield(cranfield) -> None:  # type: ignore[no-untyped-def]
    """Queries without judgements (the whole query set, 5 judged queries' qrels removed), BM25's
    ties, judged documents absent from the corpus; the qrels mapped once for the three runs."""
    data = load_dataset("cranfield")
    first = BM25Retriever(data.corpus)
    prepared = prepare_queries(data.queries, limit=50)
    runs = Runs()
    for name, pipe in _pipes(first).items():
        runs.set_coded(name, run_coded(pipe, prepared))
    qrels = cranfield.qrels[~cranfield.qrels["qid"].isin(cranfield.qrels["qid"].unique()[:5])]
    got = runs.evaluate(qrels, NATIVE)
    for name in runs:
        want = evaluate(runs.coded(name).frame(), qrels, NATIVE, per_query=True)  # type: ignore[union-attr]
        pd.testing.assert_frame_equal(got[name], want, check_exact=True)


def test_a_memory_mapped_table_is_never_read_whole(cranfield, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = DocumentTable.coerce(cranfield.corpus)
    write_documents(table, tmp_path / "documents.arrow")
    mapped = MappedDocumentTable(tmp_path / "documents.arrow", n_docs=len(table))
    on_disk, in_memory = _pipes(BM25Retriever(mapped)), _pipes(BM25Retriever(table))
    kw: dict[str, Any] = {"limit": 20, "progress": False, "drop_self_hits": False}
    got = Experiment(on_disk, cranfield, ["ndcg@10", "AP"], **kw).run()
    want = Experiment(in_memory, cranfield, ["ndcg@10", "AP"], **kw).run()
    pd.testing.assert_frame_equal(pd.DataFrame(got), pd.DataFrame(want), check_exact=True)
    assert mapped._full is None and mapped._all_ids is None  # no frame, no id column made


def _python_ranks(values: list[str]) -> list[int]:
    order = sorted(set(values))
    return [order.index(v) for v in values]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=()), max_size=6), min_size=1, max_size=25, unique=True),
       st.data())
def test_id_ranks_order_ids_as_python_compares_strings(tmp_path_factory: pytest.TempPathFactory, ids: list[str],
                                                        data: st.DataObject) -> None:
    """The tie-break of trec_eval's ranking (document ids descending, as Python compares ``str``),
    from an in-memory table (every id ranked once), a mapped one (the ids asked for) and
    ``string_ranks`` (Arrow's sort, or Python's for lone surrogates and other types)."""
    from kolm_search.engine.arrow_strings import string_ranks

    codes = data.draw(st.lists(st.integers(0, len(ids) - 1), max_size=30))
    want = _python_ranks([ids[c] for c in codes])
    assert string_ranks(np.asarray([ids[c] for c in codes], dtype=object)).tolist() == want
    table = DocumentTable(pd.DataFrame({"id": pd.Series(ids, dtype=object), "content": "x"}))
    got = table.id_ranks(np.asarray(codes, np.int64))
    assert [sorted(set(got.tolist())).index(g) for g in got.tolist()] == want  # the same order (ranks of all ids)
    if any("\ud800" <= ch <= "\udfff" for i in ids for ch in i):  # Arrow cannot hold lone surrogates
        return
    assert string_ranks(pd.Series([ids[c] for c in codes], dtype="category")).tolist() == want
    tmp = tmp_path_factory.mktemp("ids")
    write_documents(table, tmp / "documents.arrow")
    mapped = MappedDocumentTable(tmp / "documents.arrow", n_docs=len(ids))
    assert mapped.id_ranks(np.asarray(codes, np.int64)).tolist() == want and mapped._all_ids is None


def test_string_ranks_of_ids_arrow_cannot_hold_fall_back_to_python() -> None:
    from kolm_search.engine.arrow_strings import string_ranks

    values = ["b", "\ud800", "a", "\ud800", "é", 10]
    assert string_ranks(np.asarray(values, dtype=object)).tolist() == _python_ranks([str(v) for v in values])
    table = DocumentTable(pd.DataFrame({"id": pd.Series(["b", "\ud800x", "a"], dtype=object), "content": "x"}))
    assert table.id_ranks(np.array([0, 1, 2, 1])).tolist() == [1, 2, 0, 2]
