"""The placing kernel (``_kernels/coded_ranking.place_run``) against its numpy twin (the general
path's keys, stable sort and tied runs), and runs measured together through it against each run
measured alone through the general path (``evaluate_coded_together`` of runs not in rank order)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search._kernels import load
from kolm_search._kernels.coded_ranking import BAD_CODE, NAN_SCORE, NO_ROOM, UNORDERED, place_run_numpy

SCORES = st.sampled_from([0.0, -0.0, 1.0, 1.0 + 1e-9, 2.5, -3.0, 7.0, float("nan")])


@st.composite
def coded_runs(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    n_rows = draw(st.integers(1, 6))
    n_q = draw(st.integers(n_rows, n_rows + 3))
    row_code = np.array(draw(st.permutations(range(n_q)))[:n_rows], np.int64)
    if draw(st.integers(0, 9)) == 0:  # two rows on one code: not a run of distinct queries
        row_code[-1] = row_code[0]
    n_docs = draw(st.integers(1, 12))
    judged_of = np.array(draw(st.lists(st.integers(-1, 4), min_size=n_docs, max_size=n_docs)), np.int64)
    order = draw(st.permutations(range(n_rows)))
    q, doc, score = [], [], []
    for r in order[:draw(st.integers(0, n_rows))]:
        m = draw(st.integers(1, 6))
        s = sorted(draw(st.lists(SCORES.filter(lambda v: v == v), min_size=m, max_size=m)), reverse=True)
        q += [r] * m
        score += s
        doc += draw(st.lists(st.integers(0, n_docs - 1), min_size=m, max_size=m))
    q_a, doc_a, score_a = np.array(q, np.int64), np.array(doc, np.int64), np.array(score, np.float64)
    change = draw(st.integers(0, 7))
    if change == 1 and len(q_a) > 1:  # out of order somewhere
        score_a = score_a[::-1].copy()
    elif change == 2 and len(q_a):
        score_a[draw(st.integers(0, len(q_a) - 1))] = float("nan")
    elif change == 3 and len(q_a):
        doc_a[draw(st.integers(0, len(q_a) - 1))] = n_docs
    elif change == 4 and len(q_a) > 1:  # a query's entries in two places
        q_a[-1] = q_a[0]
    return q_a, doc_a, score_a, row_code, judged_of, np.int64(n_q)


@settings(max_examples=400, deadline=None)
@given(coded_runs(), st.integers(0, 3), st.integers(0, 2), st.integers(0, 3))
def test_place_run_is_its_numpy_twin(run: tuple[np.ndarray, ...], base: int, n_ties: int, short: int) -> None:
    """Placed entries, counts and tied runs as the twin's; tie arrays ``short`` positions short
    of the run's written as far as they go; outputs too short refused (``NO_ROOM``)."""
    q, doc, score, row_code, judged_of, n_q = run
    kernel = load("coded_ranking")
    n = len(q)
    status, w_count, w_doc, w_judged, w_rows, w_run = place_run_numpy(q, doc, score, row_code, judged_of, int(n_q))
    room = max(n_ties + status - short, n_ties) if status >= 0 else n_ties + n
    r_doc, r_judged = np.full(base + n + 2, -9, np.int64), np.full(base + n + 2, -9, np.int64)
    tie_rows, tie_run = np.full(room, -9, np.int64), np.full(room, -9, np.int64)
    count = np.full(int(n_q), -9, np.int64)
    got = kernel.place_run(q, doc, score, row_code, judged_of, int(n_q), base, count, r_doc, r_judged, tie_rows,
                           tie_run, n_ties)
    assert got == status
    if status in (BAD_CODE, NAN_SCORE, UNORDERED):
        assert (r_doc == -9).all() and (tie_rows == -9).all()
        return
    assert (count == w_count).all()
    assert (r_doc[base:base + n] == w_doc).all() and (r_judged[base:base + n] == w_judged).all()
    assert (r_doc[:base] == -9).all() and (r_doc[base + n:] == -9).all()
    assert (tie_rows[:n_ties] == -9).all()
    written = room - n_ties  # the kernel's order: a run's positions ascending, runs in the run's row order
    want = sorted(zip(w_rows.tolist(), w_run.tolist(), strict=True))
    got_pairs = list(zip((tie_rows[n_ties:] - base).tolist(), (tie_run[n_ties:] - base).tolist(), strict=True))
    assert set(got_pairs) <= set(want) and len(set(got_pairs)) == written
    if n:
        assert kernel.place_run(q, doc, score, row_code, judged_of, int(n_q), base + 3, count, r_doc, r_judged,
                                tie_rows, tie_run, n_ties) == NO_ROOM


def _experiment_runs(seed: int) -> tuple[list, object, list]:
    from kolm_search.compose.queries import CodedRun, prepare_queries
    from kolm_search.engine.doctable import DocumentTable
    from kolm_search.evaluation.coded_runs import QrelsCodes
    from kolm_search.evaluation.measure_pass import prepare_qrels, settings

    rng = np.random.default_rng(seed)
    n_docs, n_q = 40, 12
    table = DocumentTable.coerce(pd.DataFrame({"id": [f"d{i}" for i in rng.permutation(n_docs)],
                                               "content": "x"}))
    queries = pd.DataFrame({"qid": [f"q{i}" for i in rng.permutation(n_q)], "query": "x"})
    prepared = prepare_queries(queries, limit=20)
    qrels = pd.DataFrame({"qid": [f"q{i}" for i in rng.integers(0, n_q + 2, 60)],
                          "doc_id": [f"d{i}" for i in rng.integers(0, n_docs + 3, 60)],
                          "relevance": rng.integers(0, 3, 60)}).drop_duplicates(["qid", "doc_id"])
    specs, keys = settings(["ndcg@10", "map", "P@5", "recall@20", "iprec_at_recall_0.50", "bpref"], 1, "ignore")
    qrels_df, rel, _ = prepare_qrels(qrels, specs)
    codes = QrelsCodes(qrels_df, rel, prepared, table)
    items = []
    for _ in range(4):
        rows = rng.permutation(n_q)[:int(rng.integers(1, n_q + 1))]
        qs, ds, ss = [], [], []
        for r in rows:
            m = int(rng.integers(1, 20))
            qs += [r] * m
            ds += list(rng.choice(n_docs, m, replace=False))
            ss += sorted(rng.integers(0, 4, m).astype(float), reverse=True)  # many ties
        q = np.array(qs, np.int64)
        parts = [(0, q, np.array(ds, np.int64), np.zeros(len(q), np.int64), np.array(ss))]
        items.append((CodedRun(prepared, table, parts), None))
    return items, codes, [specs, keys]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("room", [1, 1024])
def test_runs_placed_together_equal_the_general_path(seed: int, room: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs placed by the kernel measure as the general path measures them, also with room for
    one tie position at first (each run with more placed again)."""
    from kolm_search.evaluation import coded_runs
    from kolm_search.evaluation.coded_runs import (
        _coded_arrays,
        _placed,
        _together_general,
        evaluate_coded_together,
    )

    monkeypatch.setattr(coded_runs, "_tie_room", lambda rows: room)
    items, codes, (specs, keys) = _experiment_runs(seed)
    got = evaluate_coded_together(items, codes, specs, keys)
    found = [_coded_arrays(run, codes, None, False) for run, _ in items]
    placed = _placed(found, codes, items[0][0].table)  # the kernel's path, tied judged rows among them
    assert placed is not None and len(placed[0]) == len(items)
    want = _together_general(found, codes, items[0][0].table, specs, keys, relevance_level=1, judged_only=False,
                             missing="ignore", n_threads=None)
    assert got is not None and want is not None
    for a, b in zip(got, want, strict=True):
        assert a is not None and b is not None
        assert (a.keep == b.keep).all()
        assert np.array_equal(a.values, b.values)


TIE_SCORES = st.sampled_from([0.0, -0.0, 1.0, 1.0 + 1e-9, 1.0 + 1e-6, -3.0, float("inf"), float("-inf"), 1e39, -1e39,
                              1e-46, -1e-46])


@st.composite
def tied_runs(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """Runs in rank order with many float32 ties (``-0.0`` and ``0.0``, values equal only in
    float32, infinities, values past float32's range or below its smallest), queries in any
    order of their codes, most documents judged."""
    n_q = draw(st.integers(1, 6))
    row_code = np.array(draw(st.permutations(range(n_q))), np.int64)
    n_docs = draw(st.integers(1, 10))
    judged_of = np.array(draw(st.lists(st.integers(-1, 3), min_size=n_docs, max_size=n_docs)), np.int64)
    q: list[int] = []
    score: list[float] = []
    for r in draw(st.permutations(range(n_q)))[:draw(st.integers(1, n_q))]:
        m = draw(st.integers(1, 10))
        drawn = draw(st.lists(TIE_SCORES, min_size=m, max_size=m))
        q += [r] * m
        with np.errstate(over="ignore"):  # 1e39 is inf in float32
            score += sorted(drawn, key=lambda v: -float(np.float32(v)))  # descending as float32 (stable)
    doc = np.array(draw(st.lists(st.integers(0, n_docs - 1), min_size=len(q), max_size=len(q))), np.int64)
    return np.array(q, np.int64), doc, np.array(score, np.float64), row_code, judged_of, n_q


@settings(max_examples=400, deadline=None)
@given(tied_runs(), st.integers(0, 2), st.integers(0, 12))
def test_place_run_reports_tied_runs_in_the_runs_query_order_positions_ascending(
        run: tuple[np.ndarray, ...], n_ties: int, short: int) -> None:
    """The exact sequence of tie positions and run numbers (not only the set): each query's
    runs in the order the run holds its queries, each run's positions ascending, runs in position
    order within a query, ``-0.0`` tied with ``0.0``; with ``short`` fewer places than positions,
    exactly the first ones are written and the count is still the whole."""
    import warnings

    q, doc, score, row_code, judged_of, n_q = run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 1e39 past float32's range is inf there
        status, w_count, _, _, w_rows, w_run = place_run_numpy(q, doc, score, row_code, judged_of, n_q)
    assert status >= 0
    n = len(q)
    ptr = np.concatenate([[0], np.cumsum(w_count)])
    seen = list(dict.fromkeys(row_code[q].tolist()))  # query codes in the run's order
    want = sorted(zip(w_rows.tolist(), w_run.tolist(), strict=True),
                  key=lambda p: (seen.index(int(np.searchsorted(ptr, p[0], side="right") - 1)), p[0]))
    room = n_ties + max(status - short, 0)
    r_doc, r_judged = np.full(n, -9, np.int64), np.full(n, -9, np.int64)
    tie_rows, tie_run = np.full(room, -9, np.int64), np.full(room, -9, np.int64)
    got = load("coded_ranking").place_run(q, doc, score, row_code, judged_of, n_q, 0, np.zeros(n_q, np.int64),
                                          r_doc, r_judged, tie_rows, tie_run, n_ties)
    assert got == status
    assert (tie_rows[:n_ties] == -9).all()
    written = list(zip(tie_rows[n_ties:].tolist(), tie_run[n_ties:].tolist(), strict=True))
    assert written == want[:room - n_ties]
