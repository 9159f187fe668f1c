"""The relevance recipes on small corpora: ``presets.hybrid`` (``depth``, determinism), the
deprecated ``presets.hybrid_plus`` (it warns, and still builds the RRF of its children), and
every candidate of ``benchmarks/bench_recipe.py`` through the leave-one-collection-out protocol.

The figures themselves (four development collections, MiniLM) are the benchmark's, in
``benchmarks/README.md``: no test embeds a whole collection."""

from __future__ import annotations

import importlib.util
import pickle
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import fuse, leave_one_collection_out, presets
from kolm_search.adapters import FeedbackTermExpander, LSAEmbedder
from kolm_search.contract.planners import DefaultQueryPlanner, ExpandingQueryPlanner
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.evaluation import collection_runs
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from tests.conftest import synthetic_corpus
from tests.fakes import BatchHashEmbedder
from tests.test_batch import assert_same

TEXTS = synthetic_corpus(300, 50, seed=11)
CORPUS = pd.DataFrame({"id": [f"d{i}" for i in range(len(TEXTS))], "title": [t.split()[0] for t in TEXTS],
                       "content": TEXTS})
QUERIES = ["w1 w4", "w10 w2 w33", "w5", "w0 w0 w7", "nothing-matches", "w12 w13 w14 w15"]
plus_is_deprecated = pytest.mark.filterwarnings("ignore:presets.hybrid_plus is deprecated:DeprecationWarning")


def children(table: DocumentTable, embedder: Any, feedback: str | None, lsa: int, limit: int,
             planner: Any = None) -> list[pd.DataFrame]:
    """The three children's runs, each through its own one-retriever preset (the oracle)."""
    model = LSAEmbedder(table.texts(("title", "content")), n_components=lsa)
    return [presets.bm25(table, planner=planner, feedback=feedback).search_batch(QUERIES, limit=limit).run,
            presets.dense(table, embedder, planner=planner).search_batch(QUERIES, limit=limit).run,
            presets.dense(table, model, planner=planner).search_batch(QUERIES, limit=limit).run]


def rm3_text_planner(table: DocumentTable) -> ExpandingQueryPlanner:
    return ExpandingQueryPlanner(FeedbackTermExpander(BM25Retriever(table), fb_docs=5, fb_terms=10), max_queries=2)


@plus_is_deprecated
@pytest.mark.parametrize("feedback", [None, "bo1", "rm3"])
@pytest.mark.parametrize("depth", [None, 40])
def test_is_the_rrf_of_its_children(feedback: str | None, depth: int | None) -> None:
    table = DocumentTable.from_frame(CORPUS)
    client = presets.hybrid_plus(table, BatchHashEmbedder(), k=20, depth=depth, lsa_components=16, feedback=feedback)
    got = client.search_batch(QUERIES, limit=10).run
    expected = fuse(children(table, BatchHashEmbedder(), feedback, 16, depth or 10), "rrf", k=20, limit=10)
    assert list(got["qid"]) == list(expected["qid"]) and list(got["doc_id"]) == list(expected["doc_id"])
    np.testing.assert_allclose(got["score"], expected["score"], rtol=1e-9)


@plus_is_deprecated
def test_feedback_kwargs_and_a_text_planner_reach_their_children() -> None:
    table = DocumentTable.from_frame(CORPUS)
    kw = {"fb_docs": 5, "fb_terms": 20}
    client = presets.hybrid_plus(table, BatchHashEmbedder(), depth=30, lsa_components=16, feedback="kl",
                                 feedback_kwargs=kw, planner=rm3_text_planner(table))
    sparse = client.pipeline.modules.retriever.retrievers[0]
    assert (sparse.model, sparse.fb_docs, sparse.fb_terms) == ("kl", 5, 20)
    runs = children(table, BatchHashEmbedder(), None, 16, 30, planner=rm3_text_planner(table))
    runs[0] = presets.bm25(table, planner=rm3_text_planner(table), feedback="kl",
                           feedback_kwargs=kw).search_batch(QUERIES, limit=30).run
    pd.testing.assert_frame_equal(client.search_batch(QUERIES, limit=10).run,
                                  fuse(runs, "rrf", k=60, limit=10), check_dtype=False)
    with pytest.raises(KolmValueError, match="feedback_kwargs"):
        presets.hybrid_plus(table, BatchHashEmbedder(), feedback=None, feedback_kwargs=kw)
    with pytest.raises(KolmValueError, match="model must be one of"):
        presets.hybrid_plus(table, BatchHashEmbedder(), feedback="rocchio")


@plus_is_deprecated
@pytest.mark.parametrize("paging", [(10, 0), (7, 5), (3, 60)])
def test_single_equals_batch(paging: tuple[int, int]) -> None:
    client = presets.hybrid_plus(CORPUS, BatchHashEmbedder(), depth=50, lsa_components=16)
    limit, offset = paging
    batch = client.search_batch(QUERIES, limit=limit, offset=offset)
    assert_same(batch, [client.search_sync({"query": q, "limit": limit, "offset": offset}) for q in QUERIES])


@plus_is_deprecated
def test_pickles_and_has_the_documented_parts() -> None:
    client = presets.hybrid_plus(CORPUS, BatchHashEmbedder(), lsa_components=16)
    clone = pickle.loads(pickle.dumps(client))
    pd.testing.assert_frame_equal(client.search_batch(QUERIES, limit=5).run, clone.search_batch(QUERIES, limit=5).run)
    retriever = client.pipeline.modules.retriever
    assert [type(r).__name__ for r in retriever.retrievers] == ["FeedbackRetriever", "DenseRetriever", "DenseRetriever"]
    assert retriever.method == "rrf" and retriever.k == 60 and retriever.depth == 1000 and retriever.retrievers[2].embed_queries
    sparse = retriever.retrievers[0]
    assert (sparse.model, sparse.fb_docs, sparse.fb_terms) == ("bo1", 3, 10)  # Terrier's defaults
    assert isinstance(client.pipeline.modules.planner, DefaultQueryPlanner)


def test_dense_embed_queries_ignores_the_pipelines_vectors() -> None:
    """A second dense child with its own model embeds the queries itself (the pipeline's
    vectors have another dimension), in single and batch search."""
    with pytest.raises(KolmValueError, match="embed_queries"):
        DenseRetriever(CORPUS, embeddings=np.ones((len(CORPUS), 3), np.float32), embed_queries=True)
    table = DocumentTable.from_frame(CORPUS)
    lsa = LSAEmbedder(table.texts(("title", "content")), n_components=8)
    alone = presets.dense(table, lsa).search_batch(QUERIES, limit=5).run
    inside = presets.dense(table, BatchHashEmbedder(), planner=DefaultQueryPlanner())
    inside.pipeline.modules.retriever = DenseRetriever(table, lsa, embed_queries=True)
    pd.testing.assert_frame_equal(inside.search_batch(QUERIES, limit=5).run, alone)
    single = inside.search_sync({"query": QUERIES[0], "limit": 5})
    assert [d.id for d in single.results] == list(alone[alone.qid == alone.qid.iloc[0]]["doc_id"])


def test_hybrid_plus_warns_and_names_its_replacement() -> None:
    with pytest.warns(DeprecationWarning, match=r"hybrid_plus is deprecated.*use presets\.hybrid"):
        presets.hybrid_plus(CORPUS, BatchHashEmbedder(), lsa_components=16)


def _rrf_of_children(table: DocumentTable, depth: int, limit: int) -> pd.DataFrame:
    runs = [presets.bm25(table).search_batch(QUERIES, limit=depth).run,
            presets.dense(table, BatchHashEmbedder()).search_batch(QUERIES, limit=depth).run]
    return fuse(runs, "rrf", k=60, limit=limit)


@pytest.mark.parametrize(("depth", "limit"), [(None, 10), (40, 10), (5, 10), (100, 100)])
def test_hybrid_fuses_children_cut_at_depth(depth: int | None, limit: int) -> None:
    """``depth`` sets how deep each child's list goes into the RRF (never less than the page);
    by default each child is cut at the page."""
    table = DocumentTable.from_frame(CORPUS)
    client = presets.hybrid(table, BatchHashEmbedder(), depth=depth)
    got = client.search_batch(QUERIES, limit=limit).run
    expected = _rrf_of_children(table, max(depth or limit, limit), limit)
    assert list(got["qid"]) == list(expected["qid"]) and list(got["doc_id"]) == list(expected["doc_id"])
    np.testing.assert_allclose(got["score"], expected["score"], rtol=1e-9)
    assert_same(client.search_batch(QUERIES, limit=7, offset=2),
                [client.search_sync({"query": q, "limit": 7, "offset": 2}) for q in QUERIES])
    if depth is not None and depth > limit:  # deeper lists change the fused page here
        shallow = _rrf_of_children(table, limit, limit)
        assert list(shallow["doc_id"]) != list(got["doc_id"])
    with pytest.raises(KolmValueError, match="depth"):
        presets.hybrid(table, BatchHashEmbedder(), depth=0)


def test_hybrid_is_deterministic_and_pickles() -> None:
    runs = [presets.hybrid(CORPUS, BatchHashEmbedder(), depth=50).search_batch(QUERIES, limit=20).run for _ in range(2)]
    pd.testing.assert_frame_equal(runs[0], runs[1])
    client = presets.hybrid(CORPUS, BatchHashEmbedder(), depth=50)
    clone = pickle.loads(pickle.dumps(client))
    pd.testing.assert_frame_equal(clone.search_batch(QUERIES, limit=20).run, runs[0])


def assert_same_run(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal runs whatever the order of their queries."""
    a, b = (x.astype({"qid": str, "doc_id": str}).sort_values(["qid", "rank"]).reset_index(drop=True) for x in (a, b))
    assert list(a["qid"]) == list(b["qid"]) and list(a["doc_id"]) == list(b["doc_id"])
    np.testing.assert_allclose(a["score"], b["score"], rtol=1e-9)


# -- benchmarks/bench_recipe.py: every candidate runs, through the protocol ----------------------

def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_recipe.py"
    spec = importlib.util.spec_from_file_location("bench_recipe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_recipe", module)
    spec.loader.exec_module(module)
    return module


def _collection(seed: int) -> tuple[DocumentTable, pd.DataFrame, pd.DataFrame]:
    texts = synthetic_corpus(120, 40, seed=seed)
    table = DocumentTable.from_frame(pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))],
                                                   "title": "", "content": texts}))
    queries = pd.DataFrame({"qid": [f"q{i}" for i in range(len(QUERIES))], "query": QUERIES})
    rng = np.random.default_rng(seed)
    qrels = pd.DataFrame([(q, f"d{d}", int(rng.integers(1, 3))) for q in queries["qid"]
                          for d in rng.choice(len(texts), 6, replace=False)], columns=["qid", "doc_id", "relevance"])
    return table, queries, qrels


def test_every_bench_candidate_runs_through_leave_one_collection_out() -> None:
    bench = _bench()
    colls = {f"c{i}": _collection(i) for i in range(3)}
    children = bench.Children(BatchHashEmbedder(), depth=max(bench.GRID["depth"]))
    cands = bench.candidates(children)
    assert len(cands) == np.prod([len(v) for v in bench.GRID.values()])
    runs = collection_runs(cands, {n: (t, q) for n, (t, q, _) in colls.items()})
    baseline = {n: presets.hybrid(t, BatchHashEmbedder()).search_batch(q, limit=100).run
                for n, (t, q, _) in colls.items()}
    for name in colls:
        for cand, run in runs[name].items():
            assert len(run) and run.groupby("qid").size().max() <= 100, cand
        # the baseline is one of the candidates: choosing it keeps presets.hybrid
        assert_same_run(runs[name]["bm25 1.5/0.75, bm25, rrf60, depth 100"], baseline[name])
    result = leave_one_collection_out(runs, {n: c[2] for n, c in colls.items()}, baseline, tests=("t",))
    assert list(result.folds["collection"]) == list(colls) and set(result.folds["chosen"]) <= set(cands)


def test_bench_adaptive_fusion_equals_a_plain_python_reference() -> None:
    bench = _bench()
    rng = np.random.default_rng(4)
    lists = []
    for _ in range(2):
        rows = [(q, f"d{d}", float(s)) for q in ("a", "b") for d, s in
                zip(rng.choice(12, 6, replace=False), -np.sort(-rng.normal(size=6)), strict=True)]
        run = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
        run["rank"] = run.groupby("qid").cumcount()
        lists.append(run)
    got = bench.adaptive_fuse(lists, [1.0, 0.5], limit=4)
    expected = []
    for q in ("a", "b"):
        z, conf = {}, []
        for run, w in zip(lists, [1.0, 0.5], strict=True):
            s = run[run["qid"] == q]
            mu, sd = s["score"].mean(), s["score"].std(ddof=0)
            z_list = {d: (v - mu) / sd for d, v in zip(s["doc_id"], s["score"], strict=True)}
            conf.append(w * max(z_list.values()))
            z[len(conf) - 1] = z_list
        total = sum(conf)
        fused: dict[str, float] = {}
        for i, z_list in z.items():
            for d, v in z_list.items():
                fused[d] = fused.get(d, 0.0) + conf[i] / total * v
        best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        expected += [(q, d, v) for d, v in best]
    assert [(r.qid, r.doc_id) for r in got.itertuples()] == [(q, d) for q, d, _ in expected]
    np.testing.assert_allclose(got["score"], [v for _, _, v in expected], rtol=1e-9)
