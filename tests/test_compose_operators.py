"""The operators of stage algebra against plain pandas implementations of their documented
meanings, on random runs with tied scores (hypothesis), and composition-time errors (issue 27,
item 2)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import CandidateFrame, DocumentTable, Fuse, KolmTypeError, KolmValueError, QueryBatch, Stage
from kolm_search.adapters import MMRReranker
from kolm_search.compose.frame_ops import EPSILON
from kolm_search.compose.kinds import RerankerStage
from kolm_search.compose.stage import FeatureUnion
from tests.fakes import BatchHashEmbedder

N_DOCS = 12
TABLE = DocumentTable.coerce(pd.DataFrame({"id": [f"d{i}" for i in range(N_DOCS)], "content": ["x"] * N_DOCS}))


class Given(Stage):
    """A retrieving stage returning a fixed frame, counting its calls."""

    def __init__(self, frame: CandidateFrame) -> None:
        self.frame, self.calls, self.table = frame, 0, TABLE

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        self.calls += 1
        return self.frame

    def __repr__(self) -> str:
        return "Given()"


class Rescore(RerankerStage):
    """A re-ranking stage: score = doc code mod 3 (ties), order by it, ties by input rank."""

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        assert candidates is not None
        score = (candidates.doc % 3).astype(np.float64)
        order = np.lexsort((candidates.rank, -score, candidates.query))
        return CandidateFrame(query=candidates.query[order], doc=candidates.doc[order], score=score[order],
                              rank=candidates.rank, n_queries=candidates.n_queries)


@st.composite
def frames(draw: Any, n_queries: int) -> CandidateFrame:
    """Each query: distinct random documents, integer scores (many ties), best first."""
    ptr, docs, scores = [0], [], []
    for _ in range(n_queries):
        chosen = draw(st.lists(st.integers(0, N_DOCS - 1), unique=True, max_size=8))
        sc = sorted((draw(st.integers(0, 3)) for _ in chosen), reverse=True)
        docs += chosen
        scores += sc
        ptr.append(len(docs))
    return CandidateFrame.from_ptr(ptr, np.asarray(docs, np.int64), np.asarray(scores, np.float64))


def _batch(n: int) -> QueryBatch:
    return QueryBatch(texts=["q"] * n, owner=np.arange(n), n_queries=n, limit=100, filters=[{}] * n, table=TABLE)


def _df(f: CandidateFrame) -> pd.DataFrame:
    return pd.DataFrame({"q": f.query.astype(int), "doc": f.doc.astype(int), "score": f.score.astype(float),
                         "rank": f.rank.astype(int)})


def _ranked(df: pd.DataFrame) -> pd.DataFrame:
    df = df.reset_index(drop=True)
    return df.assign(rank=df.groupby("q").cumcount())[["q", "doc", "score", "rank"]].reset_index(drop=True)


def _same(frame: CandidateFrame, expected: pd.DataFrame) -> None:
    got = _df(frame)
    pd.testing.assert_frame_equal(got[["q", "doc", "rank"]], expected[["q", "doc", "rank"]], check_dtype=False)
    np.testing.assert_allclose(got["score"], expected["score"], rtol=0, atol=1e-12)


# -- the pandas meanings -----------------------------------------------------------------------
def p_sum(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    m = a.merge(b, on=["q", "doc"], how="outer", suffixes=("_a", "_b"))
    m["score"] = m["score_a"].fillna(0) + m["score_b"].fillna(0)
    m["src"] = np.where(m["rank_a"].notna(), 0, 1)
    m["first"] = np.where(m["rank_a"].notna(), m["rank_a"], m["rank_b"])
    return _ranked(m.sort_values(["q", "score", "src", "first"], ascending=[True, False, True, True]))


def p_union(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    u = pd.concat([a, b]).drop_duplicates(["q", "doc"]).sort_values(["q", "doc"])
    return _ranked(u.assign(score=0.0))


def p_intersection(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    return _ranked(a[a.set_index(["q", "doc"]).index.isin(b.set_index(["q", "doc"]).index)])


def p_concat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    rest = b[~b.set_index(["q", "doc"]).index.isin(a.set_index(["q", "doc"]).index)].copy()
    last = a.groupby("q")["score"].min()
    first = rest.groupby("q")["score"].max()
    has = rest["q"].isin(last.index)
    rest.loc[has, "score"] = (rest.loc[has, "score"] - rest.loc[has, "q"].map(first) + rest.loc[has, "q"].map(last)
                              - EPSILON)
    both = pd.concat([a.assign(src=0), rest.assign(src=1)]).sort_values(["q", "src", "rank"])
    return _ranked(both)


def p_scale(a: pd.DataFrame, w: float) -> pd.DataFrame:
    out = a.assign(score=a["score"] * w)
    return _ranked(out.sort_values(["q", "score", "rank"], ascending=[True, False, True]) if w < 0 else out)


def p_features(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    m = a.merge(b[["q", "doc", "score"]].rename(columns={"score": "fb"}), on=["q", "doc"], how="left")
    return m.assign(fa=m["score"], fb=m["fb"].fillna(0.0))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(frames(n), frames(n))))
def test_binary_operators_match_pandas(pair: tuple[CandidateFrame, CandidateFrame]) -> None:
    fa, fb = pair
    a, b = Given(fa), Given(fb)
    batch = _batch(fa.n_queries)
    da, db = _df(fa), _df(fb)
    _same((a + b).transform(batch, None), p_sum(da, db))
    _same((a | b).transform(batch, None), p_union(da, db))
    _same((a & b).transform(batch, None), p_intersection(da, db))
    _same((a ^ b).transform(batch, None), p_concat(da, db))
    feat = (a ** b).transform(batch, None)
    exp = p_features(da, db)
    _same(feat, _ranked(exp))
    np.testing.assert_array_equal(feat.features, exp[["fa", "fb"]].to_numpy())
    assert a.calls == b.calls == 5  # once per operator and batch, whatever the number of queries


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4).flatmap(frames), st.integers(1, 9), st.sampled_from([2.0, 0.5, 0.0, -1.0, -0.25]))
def test_unary_operators_match_pandas(frame: CandidateFrame, k: int, w: float) -> None:
    a = Given(frame)
    batch = _batch(frame.n_queries)
    df = _df(frame)
    _same((a % k).transform(batch, None), _ranked(df[df["rank"] < k]))
    _same((w * a).transform(batch, None), p_scale(df, w))
    _same((a * w).transform(batch, None), p_scale(df, w))


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(frames(n), frames(n))))
def test_then_and_nested_feature_union(pair: tuple[CandidateFrame, CandidateFrame]) -> None:
    fa, fb = pair
    a, b = Given(fa), Given(fb)
    batch = _batch(fa.n_queries)
    out = (a >> Rescore()).transform(batch, None)
    ref = Rescore().transform(batch, fa)
    _same(out, _df(ref))
    three = ((a ** b) ** (a + b)).transform(batch, None)
    exp = p_features(_df(fa), _df(fb)).merge(p_sum(_df(fa), _df(fb))[["q", "doc", "score"]].rename(
        columns={"score": "fc"}), on=["q", "doc"], how="left")
    assert three.features.shape == (len(fa), 3)
    np.testing.assert_array_equal(three.features, exp[["fa", "fb", "fc"]].fillna(0.0).to_numpy())
    # a re-ranking right side scores the left side's candidates
    fr = (a ** Rescore()).transform(batch, None)
    np.testing.assert_array_equal(fr.features[:, 1], (_df(fa)["doc"] % 3).to_numpy(float))


def p_features_n(a: pd.DataFrame, *others: pd.DataFrame) -> pd.DataFrame:
    """``a``'s rows with ``f0`` its score and ``f1, f2, ...`` each other's score of the same
    document, 0 where that one lacks it (PyTerrier's ``FeatureUnion`` of all of them)."""
    m = a.assign(f0=a["score"])
    for i, b in enumerate(others, 1):
        m = m.merge(b[["q", "doc", "score"]].rename(columns={"score": f"f{i}"}), on=["q", "doc"], how="left")
    return m.fillna({f"f{i}": 0.0 for i in range(1, len(others) + 1)})


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: st.tuples(frames(n), frames(n), frames(n))))
def test_feature_union_is_flat_and_associative(triple: tuple[CandidateFrame, CandidateFrame, CandidateFrame]) -> None:
    fa, fb, fc = triple
    a, b, c, r = Given(fa), Given(fb), Given(fc), Rescore()
    batch = _batch(fa.n_queries)
    want = p_features_n(_df(fa), _df(fb), _df(fc))
    for stage in (a ** b ** c, (a ** b) ** c, a ** (b ** c), FeatureUnion(a, FeatureUnion(b, c))):
        assert isinstance(stage, FeatureUnion) and stage.operands == [a, b, c] and repr(stage) == "(Given() ** Given() ** Given())"
        got = stage.transform(batch, None)
        _same(got, _ranked(want))
        np.testing.assert_array_equal(got.features, want[["f0", "f1", "f2"]].to_numpy())
    # a re-ranking operand scores a's candidates wherever it stands; c's score still reaches all of them
    scored = _df(fa).assign(score=(_df(fa)["doc"] % 3).astype(float))
    want_r = p_features_n(_df(fa), scored, _df(fc))
    for stage in (a ** r ** c, (a ** r) ** c, a ** (r ** c)):
        got = stage.transform(batch, None)
        np.testing.assert_array_equal(got.features, want_r[["f0", "f1", "f2"]].to_numpy())
    # four operands, unions on both sides
    got = ((a ** b) ** (c ** a)).transform(batch, None)
    np.testing.assert_array_equal(got.features, p_features_n(_df(fa), _df(fb), _df(fc), _df(fa))[
        ["f0", "f1", "f2", "f3"]].to_numpy())


def test_feature_union_parameters_are_its_flat_operands() -> None:
    a = Given(CandidateFrame.from_ptr([0, 2], [0, 1], [2.0, 1.0]))
    b, c = Given(CandidateFrame.from_ptr([0, 1], [0], [5.0])), Given(CandidateFrame.from_ptr([0, 2], [1, 0], [7.0, 6.0]))
    stage = a ** b ** c
    params = stage.get_params(deep=False)
    assert list(params) == ["s0", "s1", "s2"] and params["s2"] is c
    stage.set_params(s1=b ** c)  # a union given as an operand is read flat when it runs: c scores doc 1 too
    got = stage.transform(_batch(1), None)
    np.testing.assert_array_equal(got.features, [[2.0, 5.0, 6.0, 6.0], [1.0, 0.0, 7.0, 7.0]])
    with pytest.raises(KolmValueError, match="at least two"):
        FeatureUnion(a)
    # any operand after the first may re-rank (as in ``a ** r``), set or written
    stage.set_params(s1=Rescore())
    np.testing.assert_array_equal(stage.transform(_batch(1), None).features, [[2.0, 0.0, 6.0], [1.0, 1.0, 7.0]])
    with pytest.raises(KolmTypeError, match="same kind"):
        stage.set_params(s0=Rescore())
    # a refused operand leaves the ones set before it in the same call
    pair = a + b
    with pytest.raises(KolmTypeError, match="same kind"):
        pair.set_params(left=c, right=Rescore())
    assert pair.operands == [a, b]


def _frame() -> CandidateFrame:
    return CandidateFrame.from_ptr([0, 1], [0], [1.0])


def test_compositions_fail_when_written_naming_operator_and_operands() -> None:
    a, b, r = Given(_frame()), Given(_frame()), MMRReranker(BatchHashEmbedder())
    run = pd.DataFrame({"qid": ["1"], "doc_id": ["d0"], "score": [1.0]})
    cases = [
        (lambda: a >> b, KolmTypeError, r"Given\(\) >> Given\(\): the right side retrieves"),
        (lambda: r + a, KolmTypeError, r"MMRReranker.* \+ Given\(\): the left side re-ranks"),
        (lambda: a | r, KolmTypeError, r"\|"),
        (lambda: a + run, KolmTypeError, r"Given\(\) \+ <DataFrame>: DataFrame is not a stage"),
        (lambda: run + a, KolmTypeError, r"<DataFrame> \+ Given\(\): DataFrame is not a stage"),
        (lambda: a * b, KolmTypeError, r"Given\(\) \* Given\(\): a stage is scaled by a finite number"),
        (lambda: a * float("nan"), KolmTypeError, r"\*"),
        (lambda: a % 0, KolmValueError, r"Given\(\) % 0: the rank cutoff must be a positive int"),
        (lambda: a % -3, KolmValueError, "% -3"),
        (lambda: a % 2.5, KolmValueError, "% 2.5"),
        (lambda: a % True, KolmValueError, "% True"),
        (lambda: a ^ object(), KolmTypeError, r"\^ .*object is not a stage"),
        (lambda: Fuse(a, r), KolmTypeError, r"Fuse\(Given\(\), MMRReranker.*stages\[1\].*re-ranks"),
    ]
    for make, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            make()


def test_cycles_are_refused() -> None:
    a = Given(_frame())
    pipe = Rescore() >> Rescore()
    with pytest.raises(KolmValueError, match="cycle"):
        pipe.set_params(right=pipe)
    assert pipe.operands[1] is not pipe  # unchanged
    with pytest.raises(KolmTypeError, match="same kind"):
        (a >> Rescore()).set_params(right=a)

    fused = Fuse(a % 5, Given(_frame()) % 5)
    for holder in (fused, fused % 3, fused >> Rescore()):  # a Fuse given itself, or a stage holding it
        with pytest.raises(KolmValueError, match="cycle"):
            fused.set_params(s1=holder % 4)
        assert [type(s).__name__ for s in fused.retrievers] == ["Cutoff", "Cutoff"]  # unchanged
    assert len(fused.transform(_batch(1), None)) == 1

    class Loop(RerankerStage):  # a user stage that calls the pipeline holding it
        def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
            return outer.transform(batch, None)

    outer = a >> Loop()
    with pytest.raises(KolmValueError, match="cycle"):
        outer.retrieve_batch(_batch(1))


@pytest.mark.parametrize("method", ["max", "min", "med", "sum", "mnz"])
def test_fuse_of_stages_takes_the_methods_without_weights(method: str) -> None:
    """``Fuse(a, b, method=m)`` is ``fuse([run_a, run_b], method=m)`` for the methods that take
    no weights too (min, max, med), not a refusal of weights nobody gave."""
    from kolm_search import fuse

    fa = CandidateFrame.from_ptr([0, 3, 5], [0, 1, 2, 3, 4], [3.0, 2.0, -1.0, 4.0, 4.0])
    fb = CandidateFrame.from_ptr([0, 2, 3], [2, 5, 3], [5.0, 0.5, 1.0])
    a, b = Given(fa), Given(fb)

    def run(f: CandidateFrame) -> pd.DataFrame:
        return pd.DataFrame({"qid": f.query.astype(str), "doc_id": [f"d{d}" for d in f.doc], "score": f.score,
                             "rank": f.rank})

    got = Fuse(a % 10, b % 10, method=method).transform(_batch(2), None)
    want = fuse([run(fa), run(fb)], method=method)
    assert list(zip(got.query.astype(str), (f"d{d}" for d in got.doc), strict=True)) == list(zip(want["qid"],
                                                                                                 want["doc_id"],
                                                                                                 strict=True))
    np.testing.assert_allclose(got.score, want["score"], rtol=0, atol=1e-12)


def test_a_stage_of_ones_own_is_called_on_queries() -> None:
    """A subclass of ``Stage`` with ``transform`` and ``table`` only (no ``retrieve_batch``) is run
    on queries as any stage: its output checked and cut at the limit."""
    frame = CandidateFrame.from_ptr([0, 3, 3], [4, 1, 7], [3.0, 2.0, 2.0])
    run = Given(frame)(["first", "second"], limit=2)
    expected = pd.DataFrame({"qid": [0, 0], "doc_id": ["d4", "d1"], "rank": [0, 1], "score": [3.0, 2.0]})
    pd.testing.assert_frame_equal(run, expected, check_dtype=False)
    from kolm_search import SearchError

    with pytest.raises(SearchError, match="document code 99"):
        Given(CandidateFrame.from_ptr([0, 1, 1], [99], [1.0]))(["a", "b"])


def test_operators_on_cranfield_match_pandas(cranfield) -> None:  # type: ignore[no-untyped-def]
    """The operators through ``stage(queries, limit=L)`` on BM25 and LSA runs of Cranfield (real
    ties and overlaps): each the pandas meaning of the operands' own runs at that limit."""
    from kolm_search import BM25Retriever, DenseRetriever, fuse
    from kolm_search.adapters import LSAEmbedder

    corpus, queries = cranfield["corpus"], cranfield["queries"].iloc[:60].reset_index(drop=True)
    lsa = LSAEmbedder(list(corpus["title"].fillna("") + " " + corpus["content"]), n_components=16)
    a, b = BM25Retriever(corpus), DenseRetriever(corpus, lsa)
    cut = 50

    position = {qid: i for i, qid in enumerate(queries["qid"])}  # the run's query order

    def df(run: pd.DataFrame) -> pd.DataFrame:
        run = run.rename(columns={"qid": "q", "doc_id": "doc"})[["q", "doc", "score", "rank"]]
        return run.assign(q=run["q"].map(position))

    def top(expected: pd.DataFrame) -> pd.DataFrame:
        expected = _ranked(expected)
        return expected[expected["rank"] < cut].reset_index(drop=True)

    def same(stage: Stage, expected: pd.DataFrame) -> None:
        got = df(stage(queries, limit=cut))
        pd.testing.assert_frame_equal(got[["q", "doc", "rank"]], expected[["q", "doc", "rank"]], check_dtype=False)
        np.testing.assert_allclose(got["score"], expected["score"], rtol=0, atol=1e-9)

    ra, rb = df(a(queries, limit=cut)), df(b(queries, limit=cut))
    same(a + b, top(p_sum(ra, rb)))
    same(0.3 * b + a * -2.0, top(p_sum(p_scale(rb, 0.3), p_scale(ra, -2.0))))
    same(a & b, top(p_intersection(ra, rb)))
    same((a % 20) ^ b, top(p_concat(ra[ra["rank"] < 20], rb)))
    same(a % 7, ra[ra["rank"] < 7].reset_index(drop=True))
    rrf = fuse([ra.rename(columns={"q": "qid", "doc": "doc_id"}), rb.rename(columns={"q": "qid", "doc": "doc_id"})],
               method="rrf", k=60)
    same(Fuse(a, b, k=60), top(rrf.rename(columns={"qid": "q", "doc_id": "doc"}).sort_values("q", kind="stable")))


@st.composite
def signed_frames(draw: Any, n_queries: int) -> CandidateFrame:
    """Each query: distinct documents with negative, zero and huge scores, not always falling with
    rank (a stage of one's own may return them so), many ties."""
    ptr, docs, scores = [0], [], []
    for _ in range(n_queries):
        chosen = draw(st.lists(st.integers(0, N_DOCS - 1), unique=True, max_size=10))
        docs += chosen
        scores += [draw(st.sampled_from([-2.5, -1.0, -0.0, 0.0, 0.5, 3.0, 1e9])) for _ in chosen]
        ptr.append(len(docs))
    return CandidateFrame.from_ptr(ptr, np.asarray(docs, np.int64), np.asarray(scores, np.float64))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 4).flatmap(lambda n: st.tuples(signed_frames(n), frames(n))), st.integers(1, 12),
       st.sampled_from([2.0, 0.0, -0.0, -0.25]))
def test_operators_match_pandas_on_signed_unordered_scores(pair: tuple[CandidateFrame, CandidateFrame], k: int,
                                                           w: float) -> None:
    for fa, fb in (pair, pair[::-1]):
        a, b = Given(fa), Given(fb)
        batch, da, db = _batch(fa.n_queries), _df(fa), _df(fb)
        _same((a + b).transform(batch, None), p_sum(da, db))
        _same((w * a + b).transform(batch, None), p_sum(p_scale(da, w), db))
        _same((a & b).transform(batch, None), p_intersection(da, db))
        _same((a | b).transform(batch, None), p_union(da, db))
        _same(((a % k) ^ b).transform(batch, None), p_concat(_ranked(da[da["rank"] < k]), db))
