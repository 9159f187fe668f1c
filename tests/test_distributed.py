"""Dask scale-out against a real distributed.LocalCluster (2 workers, loopback only)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, evaluate, presets
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.errors import ParameterError
from kolm_search.jobs.rerank import rerank_run
from kolm_search.retrievers.dense import exact_topk
from tests.conftest import synthetic_corpus
from tests.reliability.rerank_child import BATCH, N_QUERIES, TOP_K, CountingReranker, inputs

distributed = pytest.importorskip("distributed", reason="extra 'dask' not installed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", silence_logs=50)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


SYNTH = pd.DataFrame({"id": [f"s{i}" for i in range(3000)], "content": synthetic_corpus(3000, 200, seed=5)})
SYNTH_Q = pd.DataFrame({"qid": [f"q{i}" for i in range(60)],
                        "query": [" ".join(f"w{j}" for j in np.random.default_rng(i).integers(0, 200, 4)) for i in range(60)]})


@pytest.mark.parametrize("kind", ["bm25", "hybrid"])
def test_query_parallel_equals_in_process(dask_client: Any, cranfield: dict[str, pd.DataFrame], kind: str) -> None:
    from kolm_search import distributed as kd
    from kolm_search.adapters import LSAEmbedder
    from kolm_search.engine.doctable import DocumentTable

    for corpus, queries in ((cranfield["corpus"], cranfield["queries"]), (SYNTH, SYNTH_Q)):
        table = DocumentTable.from_frame(corpus)
        client = presets.bm25(table) if kind == "bm25" else presets.hybrid(table, LSAEmbedder(table.texts(), 64))
        want = client.search_batch(queries, limit=30).run
        got = kd.search_batch(client, queries, dask_client=dask_client, npartitions=3, limit=30)
        pd.testing.assert_frame_equal(got, want)
    strings = list(cranfield["queries"]["query"][:20])
    got = kd.search_batch(presets.bm25(cranfield["corpus"]), strings, dask_client=dask_client, limit=5)
    want = presets.bm25(cranfield["corpus"]).search_batch(strings, limit=5).run
    assert list(got.qid) == list(want.qid) and list(got.doc_id) == list(want.doc_id)


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_sharded_bm25_equals_unsharded(dask_client: Any, cranfield: dict[str, pd.DataFrame], method: str) -> None:
    from kolm_search.distributed import ShardedBM25

    for corpus, queries in ((cranfield["corpus"], cranfield["queries"]), (SYNTH, SYNTH_Q)):
        sharded = ShardedBM25(corpus, 3, dask_client=dask_client, method=method)
        got = sharded.search(queries, k=40)
        whole = BM25Retriever(corpus, method=method)
        frame = whole.retrieve_batch(QueryBatch(texts=list(queries["query"]), owner=np.arange(len(queries)),
                                                n_queries=len(queries), limit=40, filters=[{}] * len(queries), mode="fulltext"))
        want = frame.to_run(whole.table.ids, list(queries["qid"]))
        pd.testing.assert_frame_equal(got, want, check_dtype=False)  # identical docs, ranks and scores


def test_dask_dataframe_queries_progress_and_retry(dask_client: Any, cranfield: dict[str, pd.DataFrame]) -> None:
    import dask.dataframe as dd

    from kolm_search import distributed as kd

    client = presets.bm25(cranfield["corpus"])
    queries = cranfield["queries"]
    want = client.search_batch(queries, limit=10).run
    ddf = dd.from_pandas(queries, npartitions=4)
    got = kd.search_batch(client, ddf, dask_client=dask_client, limit=10, progress=True)
    pd.testing.assert_frame_equal(got, want)
    shipped = kd.ship(client, dask_client)  # shipped once, reused for several batches
    for part in (queries.head(50), queries.tail(60).reset_index(drop=True)):
        pd.testing.assert_frame_equal(kd.search_batch(shipped, part, dask_client=dask_client, npartitions=2, limit=10),
                                      client.search_batch(part, limit=10).run)
    # a retried task gives the same result: recompute after restarting every worker
    dask_client.restart()
    again = kd.search_batch(client, queries, dask_client=dask_client, npartitions=5, limit=10)
    pd.testing.assert_frame_equal(again, want)


def test_sharded_hybrid_on_cranfield(dask_client: Any, cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import fuse
    from kolm_search.adapters import LSAEmbedder
    from kolm_search.distributed import ShardedBM25, ShardedDense
    from kolm_search.engine.doctable import DocumentTable

    corpus, queries = cranfield["corpus"], cranfield["queries"]
    table = DocumentTable.from_frame(corpus)
    emb = LSAEmbedder(table.texts(), 64)
    doc_vecs, q_vecs = emb.embed_many(table.texts()), emb.embed_many(list(queries["query"]))
    sparse = ShardedBM25(corpus, 3, dask_client=dask_client).search(queries, k=20)  # the preset fuses each side's top-20
    dense = ShardedDense(list(table.ids), doc_vecs, 3, dask_client=dask_client).search(list(queries["qid"]), q_vecs, k=20)
    got = fuse([sparse, dense], k=60, limit=20)
    local = presets.hybrid(table, emb, embeddings=doc_vecs).search_batch(queries, limit=20).run
    merged = got.merge(local, on=["qid", "rank"], suffixes=("_sharded", "_local"))
    assert len(merged) == len(local)
    assert (merged.doc_id_sharded == merged.doc_id_local).mean() > 0.99  # float32 ulps may swap exact ties
    np.testing.assert_allclose(merged.score_sharded, merged.score_local, rtol=1e-9)


def test_sharded_dense_equals_unsharded(dask_client: Any) -> None:
    from kolm_search.distributed import ShardedDense

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((5000, 32)).astype(np.float32)
    ids = [f"d{i}" for i in range(5000)]
    q = rng.standard_normal((25, 32)).astype(np.float32)
    got = ShardedDense(ids, emb, 4, dask_client=dask_client).search(list(range(25)), q, k=20)
    norm = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)  # noqa: E731
    docs, scores, counts = exact_topk(norm(q).astype(np.float32), norm(emb).astype(np.float32), 20)
    assert list(got.doc_id) == [ids[d] for d in docs.ravel()]
    np.testing.assert_allclose(got.score.to_numpy(), scores.ravel(), rtol=1e-5)


def test_distributed_evaluate_and_rerank(dask_client: Any, cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import distributed as kd
    from kolm_search.adapters import FusionReranker

    run = presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"], limit=50).run
    metrics = ["ndcg@10", "map", "bpref"]
    local = evaluate(run, cranfield["qrels"], metrics)
    remote = kd.evaluate(run, cranfield["qrels"], metrics, dask_client=dask_client, npartitions=4)
    assert type(remote) is dict and remote == pytest.approx(local, abs=1e-12)
    table = kd.evaluate(run, cranfield["qrels"], metrics, dask_client=dask_client, npartitions=4, per_query=True)
    pd.testing.assert_frame_equal(table, evaluate(run, cranfield["qrels"], metrics, per_query=True))  # the same form
    with pytest.raises(ParameterError, match="per_query must be True or False"):
        kd.evaluate(run, cranfield["qrels"], metrics, dask_client=dask_client, per_query="yes")  # type: ignore[call-overload]
    ir_measures = pytest.importorskip("ir_measures")
    measures = [ir_measures.nDCG @ 10, "NumRelRet", "P(rel=2)@5"]
    local = evaluate(run, cranfield["qrels"], measures)
    remote = kd.evaluate(run, cranfield["qrels"], measures, dask_client=dask_client, npartitions=4)
    assert remote == pytest.approx(local, abs=1e-9) and remote["NumRelRet"] > 100  # summed, not averaged
    reranker = FusionReranker(["original", _length_scorer], weights=[1.0, 0.5])
    dataset = {"corpus": cranfield["corpus"], "queries": cranfield["queries"]}
    want = rerank_run(run, dataset["corpus"], reranker, top_k=10, queries=dataset["queries"], progress=False)
    got = kd.rerank_run(run, dataset["corpus"], reranker, dask_client=dask_client, npartitions=3, top_k=10,
                        queries=dataset["queries"])
    pd.testing.assert_frame_equal(got.sort_values(["qid", "rank"]).reset_index(drop=True),
                                  want.sort_values(["qid", "rank"]).reset_index(drop=True))


class KillsOnce(CountingReranker):
    """Kills its worker process the first time it is given the query ``victim`` (a marker file
    remembers it across processes), else answers as CountingReranker."""

    def __init__(self, log: str, marker: str, victim: str) -> None:
        super().__init__(log, 0.0)
        self.marker, self.victim = marker, victim

    def rerank_batch(self, items: Any) -> list[list[Any]]:
        if any(ctx.request.query == self.victim for _, ctx in items) and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().rerank_batch(items)


class FailsOn(CountingReranker):
    def __init__(self, log: str, victim: str) -> None:
        super().__init__(log, 0.0)
        self.victim = victim

    def rerank_batch(self, items: Any) -> list[list[Any]]:
        if any(ctx.request.query == self.victim for _, ctx in items):
            raise RuntimeError("model server went away")
        return super().rerank_batch(items)


def _parts(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("part-*"))}


def test_resumable_job_survives_a_killed_worker_and_equals_the_local_job(dask_client: Any, tmp_path: Path) -> None:
    from kolm_search import distributed as kd

    run, corpus, queries = inputs()
    args = {"top_k": TOP_K, "batch_size": BATCH, "queries": queries}
    local = rerank_run(run, corpus, CountingReranker(str(tmp_path / "local.log"), 0.0), output=tmp_path / "local",
                       progress=False, **args)
    killer = KillsOnce(str(tmp_path / "job.log"), str(tmp_path / "killed"), "query 7")
    got = kd.rerank_run(run, corpus, killer, dask_client=dask_client, output=tmp_path / "job", **args)
    assert (tmp_path / "killed").exists()  # a worker died mid-job; its chunk was computed again elsewhere
    pd.testing.assert_frame_equal(got, local, check_exact=True)
    assert _parts(tmp_path / "job") == _parts(tmp_path / "local")  # the same parts, byte for byte
    n_chunks = -(-N_QUERIES // BATCH)
    assert len((tmp_path / "job.log").read_text().splitlines()) <= n_chunks + 2  # at most the chunks in flight again
    memory = kd.rerank_run(run, corpus, CountingReranker(str(tmp_path / "m.log"), 0.0), dask_client=dask_client, **args)
    pd.testing.assert_frame_equal(memory, rerank_run(run, corpus, CountingReranker(str(tmp_path / "n.log"), 0.0),
                                                     progress=False, **args), check_exact=True)


def test_a_failed_job_is_resumed_from_another_client(dask_client: Any, tmp_path: Path) -> None:
    from kolm_search import distributed as kd
    from kolm_search.errors import DistributedError

    run, corpus, queries = inputs()
    args = {"top_k": TOP_K, "batch_size": BATCH, "queries": queries, "output": tmp_path / "job"}
    log = tmp_path / "job.log"
    with pytest.raises(DistributedError, match=r"rerank chunk 4 failed.*model server went away"):
        kd.rerank_run(run, corpus, FailsOn(str(log), "query 12"), dask_client=dask_client, **args)
    finished = len(list((tmp_path / "job").glob("part-*.json")))
    assert finished < -(-N_QUERIES // BATCH)
    before = len(log.read_text().splitlines()) if log.exists() else 0
    with distributed.Client(dask_client.scheduler.address) as other:
        got = kd.rerank_run(run, corpus, CountingReranker(str(log), 0.0), dask_client=other, **args)
    computed = len(log.read_text().splitlines()) - before
    assert computed == -(-N_QUERIES // BATCH) - finished  # only the parts not yet written
    want = rerank_run(run, corpus, CountingReranker(str(tmp_path / "ref.log"), 0.0), progress=False,
                      **{**args, "output": tmp_path / "ref"})
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    pd.testing.assert_frame_equal(rerank_run(run, corpus, CountingReranker(str(log), 0.0), progress=False, **args),
                                  want, check_exact=True)  # and locally: nothing left to compute
    assert len(log.read_text().splitlines()) - before == computed


def _length_scorer(docs: list, context: Any) -> list[float]:
    return [float(len(d.content)) for d in docs]


class Crasher:
    """A batch retriever that kills its worker process."""

    table = None

    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        os._exit(1)

    def retrieve(self, context: Any) -> list:
        os._exit(1)


def test_killed_worker_fails_loudly() -> None:
    import dask

    from kolm_search import DefaultQueryPlanner, SearchClient
    from kolm_search import distributed as kd

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address="127.0.0.1:0", silence_logs=50)
        client = distributed.Client(cluster)
        try:
            crashing = SearchClient({"planner": DefaultQueryPlanner(), "retriever": Crasher()})
            with pytest.raises(kd.DistributedError, match="query partition 0 failed"):
                kd.search_batch(crashing, ["a", "b", "c"], dask_client=client, npartitions=1, mode="fulltext")
        finally:
            client.close()
            cluster.close()


def test_error_paths_before_any_cluster_work() -> None:
    from kolm_search import KolmValueError
    from kolm_search import distributed as kd
    from kolm_search.retrievers.bm25 import CollectionStats

    class NoCluster:
        def scheduler_info(self) -> dict:
            return {"workers": {"w1": {}}}

        def scatter(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - must not be reached
            raise AssertionError("shipped before validating")

    with pytest.raises(KolmValueError, match="strings or a DataFrame"):
        kd.search_batch(object(), ["a", 3], dask_client=NoCluster())
    with pytest.raises(KolmValueError, match="list of str or a DataFrame"):
        kd.search_batch(object(), "one string", dask_client=NoCluster())
    with pytest.raises(KolmValueError, match="npartitions"):
        kd.search_batch(object(), ["a"], dask_client=NoCluster(), npartitions=0)
    with pytest.raises(KolmValueError, match="shape"):
        kd.ShardedDense(["a", "b"], np.ones((3, 4)), 2, dask_client=NoCluster())
    with pytest.raises(KolmValueError, match="metric"):
        kd.ShardedDense(["a"], np.ones((1, 4)), 1, dask_client=NoCluster(), metric="l2")
    with pytest.raises(KolmValueError, match="n_shards"):
        kd.ShardedDense(["a"], np.ones((1, 4)), 0, dask_client=NoCluster())
    stats = CollectionStats.from_tokens([["a", "b"], ["b"]])
    assert stats.df == {"a": 1, "b": 2} and stats.n_docs == 2 and stats.avgdl == 1.5
    merged = CollectionStats.merge([stats, CollectionStats.from_tokens([["c"]])])
    assert merged.df == {"a": 1, "b": 2, "c": 1} and merged.n_docs == 3 and merged.avgdl == pytest.approx(4 / 3)
    with pytest.raises(KolmValueError, match="lack token 'zzz'"):
        BM25Retriever(pd.DataFrame({"id": ["x"], "content": ["zzz"]}), stats=stats)
