"""Ids of every kind pandas keeps apart stay apart: bytes and str, 1 and "1", lone surrogates
(which pandas holds in object columns but pyarrow refuses). evaluate and fuse on such ids give
what pytrec_eval / plain-Python RRF give on the same data with the ids renamed to clean ones."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import FrameValidationError, evaluate, fuse, ids
from kolm_search.fusion.rrf import rrf_score

WEIRD = ["\ud800", "\udc00x", "a\udfff", "x", "1", "b'x'", "\u00e9", "d\ud83d"]


def objects(values: list[Any]) -> pd.Series:
    return pd.Series(np.array(values, dtype=object), dtype=object)


@pytest.mark.parametrize("make", [list, lambda v: np.array(v, dtype=object), objects,
                                  lambda v: pd.Index(np.array(v, dtype=object), dtype=object)])
def test_codes_keep_apart_what_pandas_keeps_apart(make: Any) -> None:
    values = [b"x", "x", 1, "1", "\ud800", "\udc00", "\ud800", 1.5, "x"]
    want_codes, want_uniques = pd.factorize(np.array(values, dtype=object))  # the reference
    codes, uniques = ids.column_codes(make(values))
    assert codes.tolist() == want_codes.tolist() and list(uniques) == list(want_uniques)
    (a, b), joint = ids.encode([make(values[:4]), make(values[4:])])
    assert len(set(a.tolist())) == 4 and len(joint) == 7
    assert [joint[c] for c in a.tolist() + b.tolist()] == values
    decoded = ids.decode(joint, np.concatenate([a, b]))
    assert list(decoded) == values


def test_surrogates_in_several_columns_sorted_and_as_strings() -> None:
    cols = [objects(["\ud800", "a", "\ud800"]), objects(["b", "\udc00"]), ["\ud800"], np.array(["\udc00", "a"])]
    codes, uniques = ids.encode(cols, sort=True)
    assert list(uniques) == sorted(["\ud800", "a", "b", "\udc00"])
    assert [[uniques[c] for c in cc] for cc in codes] == [list(c) for c in cols]
    (q,), u = ids.encode([objects(["\ud800", 7, "7"])], as_str=True)
    assert [u[c] for c in q] == ["\ud800", "7", "7"]  # as strings, 7 and "7" are one id
    table = pd.Index(["\ud800", "b"], dtype=object)
    assert ids.lookup(objects(["b", "\ud800", "\udc00"]), table).tolist() == [1, 0, -1]


def test_bytes_are_refused_where_ids_are_compared_as_strings() -> None:
    """str(b"x") is "b'x'": neither "x" nor what the user had; a clear error instead."""
    with pytest.raises(FrameValidationError, match="bytes"):
        ids.encode([objects([b"x"]), objects(["x"])], as_str=True)
    with pytest.raises(FrameValidationError, match="bytes"):
        ids.as_strings(objects([b"x", "y"]))
    run = pd.DataFrame({"qid": ["q", "q"], "doc_id": objects([b"x", "x"]), "score": [2.0, 1.0]})
    with pytest.raises(FrameValidationError, match="bytes"):
        evaluate(run, pd.DataFrame({"qid": ["q"], "doc_id": ["x"], "relevance": [1]}), ["P@1"])
    fused = fuse([run, run])  # fusion compares ids by value: two documents
    assert sorted(map(repr, fused.doc_id)) == sorted([repr(b"x"), repr("x")])


def renamed(frame: pd.DataFrame, names: dict[Any, str]) -> pd.DataFrame:
    out = frame.copy()
    for c in ("qid", "doc_id"):
        out[c] = [names[v] for v in frame[c]]
    return out


id_values = st.sampled_from(WEIRD)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(id_values, id_values), min_size=1, max_size=40, unique=True),
       st.lists(st.tuples(id_values, id_values, st.integers(0, 3)), min_size=1, max_size=30,
                unique_by=lambda t: (t[0], t[1])))
def test_evaluate_on_weird_ids_equals_pytrec_eval_on_renamed_ids(run_rows: list, qrel_rows: list) -> None:
    scores = np.random.default_rng(len(run_rows)).permutation(len(run_rows)).astype(float)  # no ties
    run = pd.DataFrame({"qid": objects([q for q, _ in run_rows]), "doc_id": objects([d for _, d in run_rows]),
                        "score": scores})
    qrels = pd.DataFrame({"qid": objects([q for q, _, _ in qrel_rows]), "doc_id": objects([d for _, d, _ in qrel_rows]),
                          "relevance": [r for _, _, r in qrel_rows]})
    names = {v: f"id{i}" for i, v in enumerate(WEIRD)}
    clean_run, clean_qrels = renamed(run, names), renamed(qrels, names)
    j: dict[str, dict[str, int]] = {}
    for q, d, r in clean_qrels.itertuples(index=False, name=None):
        j.setdefault(q, {})[d] = int(r)
    rr: dict[str, dict[str, float]] = {}
    for q, d, s in clean_run.itertuples(index=False, name=None):
        rr.setdefault(q, {})[d] = float(s)
    want = pytrec_eval.RelevanceEvaluator(j, {"ndcg_cut.10", "map", "P.5"}).evaluate(rr)
    got = evaluate(run, qrels, ["ndcg@10", "map", "P@5"], per_query=True)
    assert isinstance(got, pd.DataFrame)
    assert sorted(names[q] for q in got.qid) == sorted(want)
    for row in got.itertuples(index=False):
        w = want[names[row.qid]]
        assert (row[1], row[2], row[3]) == pytest.approx((w["ndcg_cut_10"], w["map"], w["P_5"]), abs=1e-9)


def rrf_oracle(runs: list[pd.DataFrame], k: float) -> dict[Any, dict[Any, float]]:
    out: dict[Any, dict[Any, float]] = {}
    for run in runs:
        seen: dict[Any, int] = {}
        for q, d, _s in run.sort_values("score", ascending=False, kind="stable").itertuples(index=False, name=None):
            rank = seen.get(q, 0)
            seen[q] = rank + 1
            out.setdefault(q, {})
            out[q][d] = out[q].get(d, 0.0) + rrf_score(rank, k)
    return out


mixed_ids = st.sampled_from([*WEIRD, 1, 2, b"x", b"\xff"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(WEIRD[:4]), mixed_ids), min_size=1, max_size=30, unique=True),
                min_size=1, max_size=3))
def test_fuse_on_weird_ids_equals_plain_rrf(rows: list) -> None:
    rng = np.random.default_rng(len(rows))
    runs = [pd.DataFrame({"qid": objects([q for q, _ in r]), "doc_id": objects([d for _, d in r]),
                          "score": rng.permutation(len(r)).astype(float)}) for r in rows]
    want = rrf_oracle(runs, 60)
    got = fuse(runs, k=60)
    assert list(dict.fromkeys(got.qid)) == sorted(want)  # queries in sorted order
    blocks: dict[Any, list[tuple[Any, float]]] = {}
    for q, d, s in zip(got.qid, got.doc_id, got.score, strict=True):  # no groupby: pandas infers Arrow strings
        blocks.setdefault(q, []).append((d, s))
    for q, block in blocks.items():
        assert dict(block) == pytest.approx(want[q], rel=1e-12)
        assert len(block) == len(want[q])  # 1, "1", b"x", "x" stay four documents
        assert all(a[1] >= b[1] for a, b in itertools.pairwise(block))
