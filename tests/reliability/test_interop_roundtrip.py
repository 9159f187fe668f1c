"""Odd runs (tied scores, rows out of rank order, a rank column that disagrees with the
scores, 1-based or gapped ranks, int-like ids) through every converter of
:mod:`kolm_search.engine.interop` and back: what a converter can carry survives (issue 25, defect 12).

Oracles: the input itself. ``to_pyterrier`` carries the rank order, so ``fuse([to_pyterrier(run)])``
equals ``fuse([run])`` (fuse reads ``rank`` when given); every converter carries the scored
rows, so the rows read back equal the input's bit for bit and evaluate alike; the converters
that keep row order (ir_measures' frame, the nested dict) fuse like the run without its rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import evaluate, fuse
from kolm_search.engine.interop import to_ir_measures, to_pyterrier, to_ranx, to_trec_dict
from kolm_search.engine.runs import as_run

QIDS = ["q1", "q2", "3", "10"]
DOCS = [f"d{i}" for i in range(10)] + ["10", "9", "é"]


@st.composite
def odd_runs(draw: st.DrawFn) -> pd.DataFrame:
    rows = draw(st.lists(st.tuples(st.sampled_from(QIDS), st.sampled_from(DOCS),
                                   st.sampled_from([0.0, 1.0, 1.0, 1.0000001, 2.5, -1.0, 3.0])),
                         min_size=1, max_size=40, unique_by=lambda r: (r[0], r[1])))
    run = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    how = draw(st.sampled_from(["none", "by score", "arbitrary", "one-based gapped", "ties"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if how == "by score":  # ranks as a ranker would give them, rows then shuffled
        run["rank"] = run.sort_values("score", ascending=False, kind="stable").groupby("qid").cumcount()
    elif how == "arbitrary":  # a re-ranker's order, unrelated to the scores
        run["rank"] = run.groupby("qid").cumcount().to_numpy()[rng.permutation(len(run))]
    elif how == "one-based gapped":
        run["rank"] = (run.groupby("qid").cumcount() * 3 + 1).astype(float)
    elif how == "ties":  # equal ranks too: row order decides
        run["rank"] = rng.integers(0, 3, len(run))
    return run.iloc[rng.permutation(len(run))].reset_index(drop=True)  # rows out of rank order


def _rows(frame: pd.DataFrame) -> list[tuple[str, str, bytes]]:
    back = as_run(frame)
    return sorted((str(q), str(d), np.float64(s).tobytes()) for q, d, s in
                  zip(back["qid"], back["doc_id"], back["score"], strict=True))


def _fused(runs: list[Any]) -> pd.DataFrame:
    out = fuse(runs, method="rrf")
    return out.assign(qid=out["qid"].astype(str), doc_id=out["doc_id"].astype(str))


def test_a_given_rank_order_survives_to_pyterrier() -> None:
    """On main ``to_pyterrier`` re-derived the ranks from the scores: fuse gave a, b for the
    run and b, a for its conversion."""
    run = pd.DataFrame({"qid": ["q", "q", "q"], "doc_id": ["b", "a", "c"], "score": [1.0, 1.0, 0.5],
                        "rank": [1, 0, 2]})
    assert _fused([run]).doc_id.tolist() == ["a", "b", "c"]
    pd.testing.assert_frame_equal(_fused([to_pyterrier(run)]), _fused([run]))
    assert to_pyterrier(run)[["docno", "rank"]].values.tolist() == [["a", 0], ["b", 1], ["c", 2]]


@settings(max_examples=60, deadline=None)
@given(odd_runs())
def test_every_converter_keeps_what_it_can_carry(run: pd.DataFrame) -> None:
    has_rank = "rank" in run.columns
    pt = to_pyterrier(run)
    pd.testing.assert_frame_equal(_fused([pt]), _fused([run]))  # rank order (or score order), ties included
    pd.testing.assert_frame_equal(to_pyterrier(pt), pt)  # a fixed point
    for _, group in pt.groupby("qid"):
        assert group["rank"].tolist() == list(range(len(group)))
        if not has_rank:
            assert group["score"].is_monotonic_decreasing
    unranked = run.drop(columns=["rank"]) if has_rank else run
    qrels = pd.DataFrame({"qid": run["qid"], "doc_id": run["doc_id"],
                          "relevance": (np.arange(len(run)) % 3).astype(np.int64)})
    native = evaluate(run, qrels, ["ndcg@10", "map"], per_query=True)
    outs = [to_pyterrier, to_ir_measures, to_trec_dict]
    try:
        import ranx  # noqa: F401

        outs.append(to_ranx)
    except ImportError:
        pass
    for out in outs:
        converted = out(run)
        assert _rows(converted) == _rows(run), out.__name__  # the scored rows, bit for bit
        got = evaluate(converted, out(qrels) if out is not to_ranx else qrels, ["ndcg@10", "map"], per_query=True)
        pd.testing.assert_frame_equal(got, native, check_exact=True, obj=out.__name__)
        if out in (to_ir_measures, to_trec_dict):  # they keep each query's rows in order
            pd.testing.assert_frame_equal(_fused([converted]), _fused([unranked]), obj=out.__name__)


@pytest.mark.parametrize("bad", [np.nan, np.inf, "x"])
def test_a_bad_rank_is_an_error_naming_its_row(bad: Any) -> None:
    from kolm_search.errors import FrameValidationError

    run = pd.DataFrame({"qid": ["q", "q"], "doc_id": ["a", "b"], "score": [1.0, 0.5], "rank": [0, bad]},)
    with pytest.raises(FrameValidationError, match="rank at row 1"):
        to_pyterrier(run)
