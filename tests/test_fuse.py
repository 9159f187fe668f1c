"""fuse() over run DataFrames against a plain-pandas oracle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import FrameValidationError, KolmValueError, fuse


def oracle(runs: list[pd.DataFrame], method: str, k: float, weights: list[float] | None, norm: str | None) -> dict:
    """{qid: [(doc, score)] best first, ties by first appearance} in plain Python."""
    out: dict = {}
    for qid in sorted(set().union(*[set(r.qid) for r in runs])):
        acc: dict[str, float] = {}
        nl: dict[str, int] = {}
        for li, run in enumerate(runs):
            w = 1.0 if weights is None else weights[li]
            sub = run[run.qid == qid].reset_index(drop=True)
            if "rank" not in sub:
                sub = sub.iloc[np.lexsort((np.arange(len(sub)), -sub.score.to_numpy()))].reset_index(drop=True)
            else:
                sub = sub.sort_values("rank", kind="stable").reset_index(drop=True)
            sub = sub.drop_duplicates("doc_id").reset_index(drop=False)  # keep best (first) position
            s = sub.score.to_numpy(float)
            if norm == "min-max" and len(s):  # ranx's guard: a constant list maps to 0
                s = (s - s.min()) / max(s.max() - s.min(), 1e-9)
            elif norm == "z-score" and len(s):
                s = (s - s.mean()) / max(s.std(), 1e-9)
            for (_, row), sc in zip(sub.iterrows(), s, strict=True):
                c = w / (k + row["index"] + 1) if method == "rrf" else w * sc
                acc[row.doc_id] = acc.get(row.doc_id, 0.0) + c
                nl[row.doc_id] = nl.get(row.doc_id, 0) + 1
        if method == "combmnz":
            acc = {d: v * nl[d] for d, v in acc.items()}
        out[qid] = sorted(acc.items(), key=lambda kv: -kv[1])
    return out


run_strategy = st.lists(
    st.tuples(st.sampled_from(["q1", "q2", "q3"]), st.sampled_from([f"d{i}" for i in range(8)]), st.integers(0, 5)),
    min_size=1, max_size=25,
).map(lambda rows: pd.DataFrame(rows, columns=["qid", "doc_id", "score"]).astype({"score": float}))


@settings(max_examples=120, deadline=None)
@given(st.lists(run_strategy, min_size=1, max_size=3),
       st.sampled_from([("rrf", None), ("combsum", None), ("combsum", "min-max"), ("combmnz", "z-score"), ("combmnz", "min-max")]),
       st.booleans())
def test_fuse_matches_oracle(runs: list[pd.DataFrame], method_norm: tuple[str, str | None], weighted: bool) -> None:
    method, norm = method_norm
    weights = [1.0 + i for i in range(len(runs))] if weighted else None
    got = fuse(runs, method=method, k=10, weights=weights, norm=norm)
    want = oracle(runs, method, 10, weights, norm)
    assert list(got.columns) == ["qid", "doc_id", "rank", "score"]
    assert sorted(got.qid.unique()) == list(got.qid.unique()) == sorted(want)
    for qid, items in want.items():
        sub = got[got.qid == qid]
        assert list(sub["rank"]) == list(range(len(sub)))
        np.testing.assert_allclose(sub.score.to_numpy(), [v for _, v in items], rtol=1e-9, atol=1e-12)
        # same doc order up to exact score ties
        assert sorted(zip(-sub.score.round(9), sub.doc_id)) == sorted(zip(-np.round([v for _, v in items], 9), [d for d, _ in items]))


def test_rank_column_used_and_limit_and_dict_weights() -> None:
    a = pd.DataFrame({"qid": [1, 1, 1], "doc_id": ["x", "y", "z"], "score": [0.0, 0.0, 0.0], "rank": [3, 1, 2]})
    b = pd.DataFrame({"qid": [1, 1], "doc_id": ["z", "x"], "score": [9.0, 1.0], "rank": [1, 2]})
    got = fuse({"a": a, "b": b}, weights={"b": 3.0}, limit=2, k=0)
    assert list(got.doc_id) == ["z", "x"] and len(got) == 2
    assert got.score.iloc[0] == pytest.approx(1 / 2 + 3.0 / 1)


def test_errors() -> None:
    good = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0]})
    with pytest.raises(FrameValidationError, match="lacks column"):
        fuse([good, good.drop(columns="score")])
    with pytest.raises(FrameValidationError, match="non-numeric"):
        fuse([good.assign(score=["oops"])])
    with pytest.raises(KolmValueError, match="method"):
        fuse([good], method="borda")  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="norm must"):
        fuse([good], norm="l2")
    with pytest.raises(KolmValueError, match="needs params"):
        fuse([good, good], method="gmnz")
    with pytest.raises(KolmValueError, match="takes no parameter"):
        fuse([good, good], method="max", weights=[1.0, 2.0])
    with pytest.raises(KolmValueError, match="weights"):
        fuse([good, good], weights=[1.0])
    with pytest.raises(KolmValueError, match="unknown runs"):
        fuse({"a": good}, weights={"zz": 1.0})
    with pytest.raises(KolmValueError, match="at least one"):
        fuse([])
    with pytest.raises(TypeError):
        fuse(["not a frame"])  # type: ignore[list-item]


@pytest.mark.parametrize("qid_kind", ["str", "object", "int", "category"])
def test_interleaved_query_ids_of_any_dtype(qid_kind: str) -> None:
    """Runs whose rows are not grouped by query (blocks of one query appear several times)."""
    qids = ["b", "a", "b", "a", "c", "b"]
    a = pd.DataFrame({"qid": qids, "doc_id": ["x", "x", "y", "y", "z", "x"], "score": [9.0, 5, 8, 4, 1, 7]})
    b = pd.DataFrame({"qid": ["a", "b", "a"], "doc_id": ["y", "z", "w"], "score": [3.0, 2, 1]})
    if qid_kind == "int":
        a["qid"], b["qid"] = a.qid.map({"a": 1, "b": 2, "c": 3}), b.qid.map({"a": 1, "b": 2, "c": 3})
    else:
        a["qid"], b["qid"] = a.qid.astype(qid_kind), b.qid.astype(qid_kind)
    got = fuse([a, b], k=0)
    want = oracle([a, b], "rrf", 0, None, None)
    assert list(got.qid.unique()) == sorted(want)
    for qid, items in want.items():
        sub = got[got.qid == qid]
        assert list(sub.doc_id) == [d for d, _ in items]
        np.testing.assert_allclose(sub.score, [v for _, v in items])


def test_missing_query_id_is_named() -> None:
    run = pd.DataFrame({"qid": ["q1", None, "q2"], "doc_id": ["a", "b", "c"], "score": [3.0, 2, 1]})
    with pytest.raises(FrameValidationError, match="qid"):
        fuse([run])
    run = pd.DataFrame({"qid": [1.0, np.nan, 2.0], "doc_id": ["a", "b", "c"], "score": [3.0, 2, 1]})
    with pytest.raises(FrameValidationError, match="qid"):
        fuse([run])


@pytest.mark.parametrize("kind", ["shared", "distinct", "mixed", "category", "arrow"])
def test_id_columns_of_every_kind_match_the_oracle(kind: str) -> None:
    """Object columns (one object per query, or one per row; mixed types that pandas keeps
    apart), categoricals with different categories per run, and Arrow strings: the oracle's
    fused lists, with the ids handed back in their own kind."""
    rng = np.random.default_rng(2)
    runs = []
    for _r in range(3):
        q = np.sort(rng.integers(0, 6, 300))
        d = rng.integers(0, 40, 300)
        frame = pd.DataFrame({"qid": [f"q{i}" for i in q], "doc_id": [f"d{i}" for i in d],
                              "score": rng.random(300)}).drop_duplicates(["qid", "doc_id"])
        if kind == "shared":  # one object per query id
            pool = {f"q{i}": "".join(["q", str(i)]) for i in range(6)}
            frame["qid"] = np.array([pool[v] for v in frame.qid], dtype=object)
        elif kind == "distinct":
            frame["qid"] = np.array(["".join(["q", v[1:]]) for v in frame.qid], dtype=object)
        elif kind == "mixed":  # 1, "1" and b"1" are three queries; 2.0 and 2 are one
            values = np.array([1, "1", b"1", 2.0, 2, "x"], dtype=object)
            frame["qid"] = values[np.asarray([int(v[1:]) for v in frame.qid])]
        elif kind == "category":
            frame = frame.astype({"qid": "category", "doc_id": "category"})
        runs.append(frame.reset_index(drop=True))
    if kind == "mixed":  # ids that pandas keeps apart but cannot order: a clear error, not a guess
        with pytest.raises(FrameValidationError, match="mixed types"):
            fuse(runs, k=10)
        return
    got = fuse(runs, k=10)
    want = oracle(runs, "rrf", 10, None, None)
    assert [str(q) for q in got.qid.unique()] == [str(q) for q in want]
    for qid, items in want.items():
        sub = got[got.qid == qid]
        assert list(sub.doc_id) == [d for d, _ in items]
        np.testing.assert_allclose(sub.score, [v for _, v in items], rtol=1e-12)
    if kind == "category":
        assert isinstance(got.qid.dtype, pd.CategoricalDtype) and isinstance(got.doc_id.dtype, pd.CategoricalDtype)


@pytest.mark.parametrize("layout", ["shared-order", "shuffled-run", "split-query"])
def test_large_runs_hashed_in_blocks_equal_the_global_path(layout: str) -> None:
    """Runs big enough to hash their documents in blocks of queries (when every run lists the
    queries in one order, each query's rows together) fuse exactly as through global codes
    (categorical ids take that path), and layouts that do not qualify fall back to it."""
    rng = np.random.default_rng(11)
    runs = []
    for r in range(3):
        n_q, depth = 150, 200
        docs = rng.integers(0, 5000, (n_q, depth))
        frame = pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_q)], depth),
                              "doc_id": [f"d{d}" for d in docs.ravel()],
                              "score": rng.random(n_q * depth).round(2)})
        if layout == "shuffled-run" and r == 1:  # queries in another order in one run
            frame = frame.iloc[np.argsort(rng.permutation(n_q).repeat(depth), kind="stable")]
        if layout == "split-query" and r == 2:  # one query's rows in two places
            frame = pd.concat([frame.iloc[100:], frame.iloc[:100]])
        runs.append(frame.reset_index(drop=True))
    for method, norm in (("rrf", None), ("combmnz", "min-max")):
        got = fuse(runs, method=method, norm=norm, limit=50)
        want = fuse([r.astype({"qid": "category", "doc_id": "category"}) for r in runs], method=method, norm=norm,
                    limit=50)
        pd.testing.assert_frame_equal(got.astype({"qid": str, "doc_id": str}), want.astype({"qid": str, "doc_id": str}))


@pytest.mark.parametrize("kind", ["str", "object-mixed", "int"])
def test_ids_hashed_in_blocks_come_back_as_the_global_path_gives_them(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused run's ids are read from each block's own uniques: the same values and the
    same dtype as when every id is hashed in one table (blocks too big to split)."""
    from kolm_search.engine import ids

    rng = np.random.default_rng(5)
    runs = []
    for r in range(2):
        n_q, depth = 120, 300
        raw = rng.integers(0, 4000, n_q * depth)
        if kind == "str":
            docs: object = pd.array([f"d{d}" for d in raw], dtype="str")
        elif kind == "object-mixed":  # ints in one run, strings in the other
            docs = np.array([int(d) if r == 0 else f"d{d}" for d in raw], dtype=object)
        else:
            docs = raw
        runs.append(pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_q)], depth), "doc_id": docs,
                                  "score": rng.random(n_q * depth)}))
    blocked = fuse(runs, limit=40)
    monkeypatch.setattr(ids, "_BLOCK_ROWS", 1 << 40)
    whole = fuse(runs, limit=40)
    pd.testing.assert_frame_equal(blocked, whole)
    assert [type(v) for v in blocked.doc_id] == [type(v) for v in whole.doc_id]


def test_one_big_run_of_distinct_str_ids_fuses_as_through_categoricals() -> None:
    """One run of Arrow strings, no query repeating a document, big enough for the position
    codes that evaluate uses: fuse still reads every id back."""
    rng = np.random.default_rng(8)
    n_q, depth = 100, 800
    docs = np.stack([rng.permutation(5000)[:depth] for _ in range(n_q)]).ravel()
    run = pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_q)], depth),
                        "doc_id": pd.array([f"d{d}" for d in docs], dtype="str"), "score": rng.random(n_q * depth)})
    got = fuse([run], limit=30)
    want = fuse([run.astype({"qid": "category", "doc_id": "category"})], limit=30)
    pd.testing.assert_frame_equal(got.astype({"qid": str, "doc_id": str}), want.astype({"qid": str, "doc_id": str}))
