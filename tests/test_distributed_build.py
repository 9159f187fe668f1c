"""Sharded indexes built by the workers of a real distributed.LocalCluster from corpus files,
against the single-machine index of the same files; workers killed during builds and searches."""

from __future__ import annotations

import functools
import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever
from kolm_search.errors import (
    DistributedError,
    FrameValidationError,
    KolmError,
    KolmValueError,
    ParameterError,
)
from tests.conftest import synthetic_corpus

distributed = pytest.importorskip("distributed", reason="extra 'dask' not installed")

N_DOCS = 900
TEXTS = synthetic_corpus(N_DOCS, 40, seed=11, max_len=12)  # a small vocabulary: many tied scores
for _i in range(0, N_DOCS, 97):
    TEXTS[_i] = "w1 w2"  # the same text in every shard: its ties are ordered by corpus position
QUERIES = pd.DataFrame({"qid": [f"q{i}" for i in range(40)],
                        "query": ["w1 w2", "w3", *(" ".join(f"w{j}" for j in np.random.default_rng(i).integers(0, 45, 3))
                                                   for i in range(38))]})


def _cluster(**config: Any) -> Any:
    import dask

    with dask.config.set(config):
        return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                        dashboard_address="127.0.0.1:0", silence_logs=50)


@pytest.fixture(scope="module")
def dc() -> Iterator[Any]:
    cluster = _cluster()
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _records(n: int = N_DOCS) -> list[dict[str, str]]:
    return [{"_id": f"d{i}", "title": "w5" if i % 7 == 0 else "", "text": TEXTS[i]} for i in range(n)]


def _write(root: Path, kind: str, records: list[dict[str, str]] | None = None) -> Any:
    """The corpus as ``kind``: a file, a folder, or a list of files."""
    recs = _records() if records is None else records
    lines = "".join(json.dumps(r) + "\n" for r in recs)
    if kind == "jsonl":
        (root / "c.jsonl").write_text(lines)
        return root / "c.jsonl"
    if kind == "beir":
        (root / "beir").mkdir()
        (root / "beir" / "corpus.jsonl").write_text(lines)
        return root / "beir"
    if kind == "jsonl.gz":
        with gzip.open(root / "c.jsonl.gz", "wt") as fh:
            fh.write(lines)
        return root / "c.jsonl.gz"
    if kind == "tsv":
        (root / "c.tsv").write_text("".join(f"{r['_id']}\t{r['text']}\n" for r in recs))
        return root / "c.tsv"
    if kind == "parquet":
        frame = pd.DataFrame({"id": [r["_id"] for r in recs], "content": [r["text"] for r in recs]})
        frame.to_parquet(root / "c.parquet", row_group_size=70)
        return root / "c.parquet"
    (root / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:300]))
    (root / "b.tsv").write_text("".join(f"{r['_id']}\t{r['text']}\n" for r in recs[300:600]))
    pd.DataFrame({"_id": [r["_id"] for r in recs[600:]], "text": [r["text"] for r in recs[600:]]}).to_parquet(
        root / "c.parquet", row_group_size=100)
    return [str(root / "a.jsonl"), str(root / "b.tsv"), str(root / "c.parquet")]


def _run(index: BM25Retriever, queries: pd.DataFrame, k: int) -> pd.DataFrame:
    docs, scores, counts = index.score_texts(list(queries["query"]), k)
    keep = np.arange(k)[None, :] < counts[:, None]
    return pd.DataFrame({"qid": np.repeat(queries["qid"].to_numpy(dtype=object), counts),
                         "doc_id": index.table.ids[docs[keep]], "rank": (np.cumsum(keep, axis=1) - 1)[keep],
                         "score": scores[keep].astype(np.float64)})


def _same_run(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False,
                                  check_exact=True)  # the same documents, ranks and float32 scores, ties included


def _no_leftovers(root: Path) -> None:
    assert not list(root.glob("build-*/*.spill-*")), "spill folders left"
    assert len(list(root.glob("build-*"))) <= 1


@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "tsv", "parquet", "files", "beir"])
@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_a_sharded_build_from_files_equals_the_single_machine_index(dc: Any, tmp_path: Path, kind: str,
                                                                    method: str) -> None:
    from kolm_search.distributed import ShardedBM25

    source = _write(tmp_path, kind)
    whole = BM25Retriever.build(source, tmp_path / "whole", method=method, chunk_size=128)
    sharded = ShardedBM25.build(source, tmp_path / "ix", n_shards=3, dask_client=dc, method=method, chunk_size=50)
    assert sharded.shard_sizes == [int(b - a) for a, b in zip(sharded.bounds[:-1], sharded.bounds[1:], strict=True)]
    assert sum(sharded.shard_sizes) == N_DOCS and min(sharded.shard_sizes) > 0
    want = _run(whole, QUERIES, 60)
    got = sharded.search(QUERIES, k=60)
    _same_run(got, want)
    tied = got[got.qid == "q0"]
    ties = tied[tied.score == tied.score.value_counts().idxmax()]  # "w1 w2" in every shard
    assert len(ties) >= 9 and len(set(np.searchsorted(sharded.bounds, whole.table.codes(ties.doc_id), "right"))) == 3
    stats = sharded.stats
    assert stats.n_docs == N_DOCS and stats.avgdl == float(whole.doc_len.sum()) / N_DOCS
    assert stats.df == dict(zip(whole.vocab, np.diff(whole.t_ptr).tolist(), strict=True))
    again = ShardedBM25.load(tmp_path / "ix", dask_client=dc)  # the folder alone
    _same_run(again.search(QUERIES, k=60), want)
    _no_leftovers(tmp_path / "ix")


def test_more_shards_than_row_groups_and_a_rebuild_that_replaces_the_index(dc: Any, tmp_path: Path) -> None:
    from kolm_search.distributed import ShardedBM25

    records = _records(150)
    pd.DataFrame({"id": [r["_id"] for r in records], "content": [r["text"] for r in records]}).to_parquet(
        tmp_path / "c.parquet", row_group_size=100)  # two row groups, four shards: two are empty
    sharded = ShardedBM25.build(tmp_path / "c.parquet", tmp_path / "ix", n_shards=4, dask_client=dc, method="bm25l")
    assert sorted(sharded.shard_sizes) == [0, 0, 50, 100]
    whole = BM25Retriever.build(tmp_path / "c.parquet", method="bm25l")
    _same_run(sharded.search(QUERIES, k=20), _run(whole, QUERIES, 20))
    old_build = next((tmp_path / "ix").glob("build-*")).name
    source = _write(tmp_path, "jsonl")
    rebuilt = ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=dc)
    _same_run(rebuilt.search(QUERIES, k=20), _run(BM25Retriever.build(source), QUERIES, 20))
    assert old_build not in {p.name for p in (tmp_path / "ix").iterdir()}  # the old build's folder removed
    _no_leftovers(tmp_path / "ix")


def _single_machine_error(source: Any, tmp_path: Path) -> str:
    with pytest.raises(FrameValidationError) as err:
        BM25Retriever.build(source, tmp_path / "single")
    return str(err.value)


@pytest.mark.parametrize("case", ["broken line", "duplicate across shards", "parquet type"])
def test_bad_input_is_named_as_the_single_machine_build_names_it_and_nothing_is_written(dc: Any, tmp_path: Path,
                                                                                      case: str) -> None:
    from kolm_search.distributed import ShardedBM25

    records = _records()
    if case == "parquet type":
        frame = pd.DataFrame({"id": [r["_id"] for r in records], "content": [r["text"] for r in records]})
        frame.iloc[:630].to_parquet(tmp_path / "a.parquet", row_group_size=90)
        bad = frame.iloc[630:].assign(content=1)
        bad.to_parquet(tmp_path / "b.parquet", row_group_size=90)
        source: Any = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
        expected = r"b\.parquet row group 0: column 'content' has type int64"
    else:
        path = tmp_path / "c.jsonl"
        lines = [json.dumps(r) for r in records]
        if case == "broken line":
            lines[700] = lines[700][:-5]
            expected = r"c\.jsonl:701: invalid JSON"
        else:
            lines[800] = json.dumps({**records[800], "_id": "d12"})
            expected = r"c\.jsonl: line 801: duplicate document id 'd12' \(first at .*c\.jsonl: line 13\)"
        path.write_text("\n".join(lines) + "\n")
        source = path
    message = _single_machine_error(source, tmp_path)
    with pytest.raises(FrameValidationError, match=expected) as err:
        ShardedBM25.build(source, tmp_path / "ix", n_shards=3, dask_client=dc)
    assert str(err.value) == message
    assert not (tmp_path / "ix").exists()  # a folder the build made is removed


def _kill_once(marker: str, label: str, at: str) -> None:
    """A worker's step hook: the first worker to reach step ``label`` dies (``marker`` remembers it)."""
    if at != label:
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os._exit(1)


def _install(marker: str, label: str) -> None:
    from kolm_search.distributed import shard_build

    shard_build._step_hook = functools.partial(_kill_once, marker, label)


def _uninstall() -> None:
    from kolm_search.distributed import shard_build

    shard_build._step_hook = None


class _Killing:
    """Every worker dies at step ``label`` the first time one reaches it (and the cluster is back to
    two workers afterwards)."""

    def __init__(self, dc: Any, marker: Path, label: str) -> None:
        self.dc, self.marker, self.label = dc, marker, label

    def __enter__(self) -> None:
        self.dc.run(_install, str(self.marker), self.label)

    def __exit__(self, *exc: Any) -> None:
        self.dc.run(_uninstall)
        self.dc.wait_for_workers(2, timeout=60)


@pytest.mark.parametrize("label", ["read 1", pytest.param("write 0", marks=pytest.mark.slow)])
def test_a_worker_killed_during_a_build_is_recovered_and_the_index_is_whole(dc: Any, tmp_path: Path, label: str) -> None:
    from kolm_search.distributed import ShardedBM25

    source = _write(tmp_path, "jsonl")
    with _Killing(dc, tmp_path / "killed", label):
        sharded = ShardedBM25.build(source, tmp_path / "ix", n_shards=3, dask_client=dc, chunk_size=40)
    assert (tmp_path / "killed").exists()  # a worker died in the middle of the build
    _same_run(sharded.search(QUERIES, k=50), _run(BM25Retriever.build(source), QUERIES, 50))
    _no_leftovers(tmp_path / "ix")


def test_a_worker_killed_during_a_search_is_recovered(dc: Any, tmp_path: Path) -> None:
    from kolm_search.distributed import ShardedBM25

    source = _write(tmp_path, "parquet")
    sharded = ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=dc, method="bm25+")
    want = _run(BM25Retriever.build(source, method="bm25+"), QUERIES, 30)
    with _Killing(dc, tmp_path / "killed", "score 1"):
        got = sharded.search(QUERIES, k=30)
    assert (tmp_path / "killed").exists()  # the shard was loaded again from its folder, the search run again
    _same_run(got, want)


def test_a_sharded_index_shipped_from_the_client_fails_loudly_when_a_worker_dies(dc: Any, tmp_path: Path) -> None:
    from kolm_search.distributed import ShardedBM25

    corpus = pd.DataFrame({"id": [r["_id"] for r in _records(300)], "content": TEXTS[:300]})
    sharded = ShardedBM25(corpus, 2, dask_client=dc)
    with _Killing(dc, tmp_path / "killed", "score 1"), \
            pytest.raises(DistributedError, match=r"shard [01] was cancelled on the cluster: an input was lost with a worker"):
        sharded.search(QUERIES, k=10, timeout=60)  # shard 0 too when both shards' data were on the killed worker


@pytest.mark.slow  # its own cluster, two workers killed and started again: ~10 s
def test_with_no_retries_a_killed_worker_fails_the_build_and_the_search_loudly(tmp_path: Path) -> None:
    from kolm_search.distributed import ShardedBM25

    source = _write(tmp_path, "jsonl")
    cluster = _cluster(**{"distributed.scheduler.allowed-failures": 0})
    client = distributed.Client(cluster)
    try:
        first = ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=client)
        want = first.search(QUERIES, k=20)
        before = sorted(p.name for p in (tmp_path / "ix").iterdir())
        with _Killing(client, tmp_path / "killed-build", "read 1"), \
                pytest.raises(DistributedError, match=r"shard 1 \(read\) failed on the cluster: KilledWorker"):
            ShardedBM25.build(source, tmp_path / "ix", n_shards=3, dask_client=client)
        assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == before  # the index it held, untouched
        _same_run(ShardedBM25.load(tmp_path / "ix", dask_client=client).search(QUERIES, k=20), want)
        with _Killing(client, tmp_path / "killed-search", "score 0"), \
                pytest.raises(DistributedError, match=r"shard [01] failed on the cluster: KilledWorker"):
            first.search(QUERIES, k=20)  # shard 1 too when the first kill left both shards on one worker
    finally:
        client.close()
        cluster.close()


def test_a_shard_that_is_missing_replaced_or_of_another_size_is_refused_on_load(dc: Any, tmp_path: Path) -> None:
    import shutil

    from kolm_search.distributed import ShardedBM25

    source = _write(tmp_path, "tsv")
    ShardedBM25.build(source, tmp_path / "ix", n_shards=3, dask_client=dc)
    ShardedBM25.build(source, tmp_path / "other", n_shards=3, dask_client=dc)
    (build,) = (tmp_path / "ix").glob("build-*")
    (other,) = (tmp_path / "other").glob("build-*")
    shutil.rmtree(build / "shard-001")
    shutil.copytree(other / "shard-001", build / "shard-001")  # a complete shard, of another build
    with pytest.raises(KolmValueError, match=r"shard 1 was saved as generation .* records"):
        ShardedBM25.load(tmp_path / "ix", dask_client=dc)
    shutil.rmtree(build / "shard-002")
    with pytest.raises(KolmValueError, match=r"shard-002.* is not a saved index|shard 1 was saved"):
        ShardedBM25.load(tmp_path / "ix", dask_client=dc)
    body = json.loads((tmp_path / "other" / "manifest.json").read_text())
    body["shards"] = body["shards"][:2]  # a manifest that names part of the shards: its sizes no longer add up
    (tmp_path / "other" / "manifest.json").write_text(json.dumps(body))
    with pytest.raises(KolmValueError, match="not the sum of the shards' sizes"):
        ShardedBM25.load(tmp_path / "other", dask_client=dc)


def test_a_cluster_without_workers_is_waited_for_until_the_deadline_then_named(dc: Any, tmp_path: Path) -> None:
    """A cluster with no worker at the moment a sharded index is loaded or built (its workers
    restarting after one was killed, or still starting: before, ``ZeroDivisionError``) is waited
    for: a worker that comes in time is used; none within the deadline is a ``DistributedError``
    naming what waited, raised at the deadline, not after it."""
    import threading
    import time

    from kolm_search.distributed import ShardedBM25
    from kolm_search.distributed._wait import Deadline, cluster_workers

    source = _write(tmp_path, "tsv")
    ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=dc)
    want = _run(BM25Retriever.build(source, tmp_path / "whole"), QUERIES, 20)
    empty = distributed.LocalCluster(n_workers=0, threads_per_worker=1, processes=True, host="127.0.0.1",
                                     dashboard_address="127.0.0.1:0", silence_logs=50)
    client = distributed.Client(empty)
    try:
        started = time.monotonic()
        with pytest.raises(DistributedError, match=r"loading the sharded index .* has no workers \(none came within 1 s"):
            ShardedBM25.load(tmp_path / "ix", dask_client=client, timeout=1.0)
        assert time.monotonic() - started < 20
        with pytest.raises(DistributedError, match=r"the sharded build of .*ix2: the Dask cluster has no workers"):
            ShardedBM25.build(source, tmp_path / "ix2", n_shards=2, dask_client=client, timeout=1.0)
        assert not (tmp_path / "ix2").exists()
        late = threading.Timer(0.5, lambda: empty.scale(1))  # a worker that comes while the load waits
        late.start()
        loaded = ShardedBM25.load(tmp_path / "ix", dask_client=client, timeout=60)
        late.join()
        _same_run(loaded.search(QUERIES, k=20, timeout=60), want)
        assert cluster_workers(client, Deadline(1.0, "a probe")) == loaded.workers[:1]
    finally:
        client.close()
        empty.close()


def test_deadlines_and_arguments_are_checked(dc: Any, tmp_path: Path) -> None:
    from kolm_search.distributed import ShardedBM25, ShardedDense

    source = _write(tmp_path, "jsonl")
    with pytest.raises(DistributedError, match=r"did not finish within 0\.001 s"):
        ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=dc, timeout=0.001)
    assert not (tmp_path / "ix").exists()
    with pytest.raises(ParameterError, match="n_shards"):
        ShardedBM25.build(source, tmp_path / "ix", n_shards=0, dask_client=dc)
    with pytest.raises(KolmValueError, match="unknown BM25 parameter"):
        ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=dc, mode="x")
    with pytest.raises(ParameterError, match="timeout"):
        ShardedBM25.build(source, tmp_path / "ix", n_shards=2, dask_client=dc, timeout=-1)
    with pytest.raises(KolmValueError, match="vectors= .* or embedder="):
        ShardedDense.build(source, tmp_path / "dx", n_shards=2, dask_client=dc)
    (tmp_path / "file").write_text("x")
    with pytest.raises(KolmValueError, match="not a folder"):
        ShardedBM25.build(source, tmp_path / "file", n_shards=2, dask_client=dc)
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "build-tools").mkdir()
    with pytest.raises(KolmValueError, match="holds 'build-tools' and no index"):
        ShardedBM25.build(source, tmp_path / "project", n_shards=2, dask_client=dc)
    with pytest.raises(KolmValueError, match="no manifest.json"):
        ShardedBM25.load(tmp_path / "nothing", dask_client=dc)
    with pytest.raises(KolmError, match="another sharded build"):
        import filelock

        (tmp_path / "busy").mkdir()
        with filelock.FileLock(str(tmp_path / "busy" / ".kolm-build.lock")):
            ShardedBM25.build(source, tmp_path / "busy", n_shards=2, dask_client=dc)


class HashEmbedder:
    """Bag of hashed tokens: deterministic in every process (crc32), and it pickles."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def embed(self, text: str) -> np.ndarray:
        return self.embed_many([text])[0]

    def embed_many(self, texts: list[str]) -> np.ndarray:
        import zlib

        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for token in text.split():
                out[i, zlib.crc32(token.encode()) % self.dim] += 1.0
        return out


def _clustered(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((16, d)).astype(np.float32)
    return (centres[rng.integers(0, 16, n)] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)


def test_sharded_dense_from_a_vectors_file_exact_and_one_ann_index_per_shard(dc: Any, tmp_path: Path) -> None:
    pytest.importorskip("faiss", reason="extra 'ann' not installed")
    from kolm_search.distributed import ShardedDense
    from kolm_search.distributed.shard_merge import merge_parts
    from kolm_search.retrievers.dense import DenseRetriever

    source = _write(tmp_path, "jsonl")
    vectors = _clustered(N_DOCS, 16, 0)
    np.save(tmp_path / "v.npy", vectors)
    queries = _clustered(25, 16, 1)
    qids = [f"q{i}" for i in range(25)]
    table = BM25Retriever.build(source).table
    exact = ShardedDense.build(source, tmp_path / "exact", n_shards=3, dask_client=dc, vectors=tmp_path / "v.npy")
    got = exact.search(qids, queries, k=10)
    docs, scores, counts = DenseRetriever(table, embeddings=vectors).search_vectors(queries, 10)
    assert list(got.doc_id) == list(table.ids[docs.ravel()])
    np.testing.assert_allclose(got.score, scores.ravel(), rtol=1e-6)

    ann = ShardedDense.build(source, tmp_path / "hnsw", n_shards=3, dask_client=dc, vectors=tmp_path / "v.npy",
                             index="hnsw", n_threads=1)
    got = ann.search(qids, queries, k=10)
    parts = []  # the oracle: each shard's rows indexed alone, the same parameters, merged
    for a, b in zip(ann.bounds[:-1], ann.bounds[1:], strict=True):
        one = DenseRetriever(table.take(np.arange(a, b)), embeddings=vectors[a:b], index="hnsw", n_threads=1)
        d, s, c = one.search_vectors(queries, 10)
        ids = np.where(np.arange(10)[None, :] < c[:, None], one.table.ids[np.maximum(d, 0)], None)
        parts.append((d, s, c, ids))
    _, s, c, ids = merge_parts(parts, list(ann.bounds[:-1]), 10)
    assert list(got.doc_id) == [i for row, n in zip(ids, c, strict=True) for i in row[:n]]
    np.testing.assert_array_equal(got.score.to_numpy(np.float32), s[np.arange(10)[None, :] < c[:, None]])
    recall = np.mean([len(set(got[got.qid == q].doc_id) & set(table.ids[docs[i]])) / 10 for i, q in enumerate(qids)])
    assert recall >= 0.9
    again = ShardedDense.load(tmp_path / "hnsw", dask_client=dc)
    pd.testing.assert_frame_equal(again.search(qids, queries, k=10), got)



def test_sharded_dense_embedded_on_the_workers_and_a_vectors_file_of_another_corpus(dc: Any, tmp_path: Path) -> None:
    from kolm_search.distributed import ShardedDense
    from kolm_search.retrievers.dense import DenseRetriever

    source = _write(tmp_path, "jsonl")
    table = BM25Retriever.build(source).table
    emb = HashEmbedder(24)  # embedded on the workers, each shard its own documents
    embedded = ShardedDense.build(source, tmp_path / "embedded", n_shards=2, dask_client=dc, embedder=emb, metric="ip")
    local = DenseRetriever(table, emb, metric="ip")
    q_emb = emb.embed_many(list(QUERIES["query"]))
    got = embedded.search(list(QUERIES["qid"]), q_emb, k=15)
    d, s, c = local.search_vectors(q_emb, 15)
    assert list(got.doc_id) == list(table.ids[d[np.arange(15)[None, :] < c[:, None]]])
    np.testing.assert_allclose(got.score, s[np.arange(15)[None, :] < c[:, None]], rtol=1e-6)

    np.save(tmp_path / "short.npy", _clustered(N_DOCS - 1, 16, 0))
    with pytest.raises(KolmValueError, match=r"short\.npy: holds 899 vectors; the corpus has 900 documents"):
        ShardedDense.build(source, tmp_path / "bad", n_shards=2, dask_client=dc, vectors=tmp_path / "short.npy")
    assert not (tmp_path / "bad").exists()
