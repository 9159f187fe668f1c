"""Resumable re-ranking jobs (rerank_run(output=...)): equal to the in-memory job, resumed after
a failure or a SIGKILL at any point with no more than the chunk in flight recomputed, another
job's folder refused by name, damaged parts recomputed, progress on stderr."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import KolmTypeError, SearchError
from kolm_search.adapters import LSAEmbedder, MMRReranker
from kolm_search.errors import JobMismatchError
from kolm_search.io import read_run, write_run
from kolm_search.jobs.rerank import rerank_run
from tests.reliability.rerank_child import BATCH, N_QUERIES, TOP_K, CountingReranker, inputs

N_CHUNKS = -(-N_QUERIES // BATCH)


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def part_digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("part-*.parquet"))}


def job(tmp_path: Path, name: str, reranker: Any = None, **kw: Any) -> pd.DataFrame:
    run, corpus, queries = inputs()
    reranker = reranker or CountingReranker(str(tmp_path / f"{name}.log"), 0.0)
    args = {"top_k": TOP_K, "batch_size": BATCH, "queries": queries, "progress": False, "output": tmp_path / name, **kw}
    return rerank_run(run, corpus, reranker, **args)


def test_output_equals_the_in_memory_job(tmp_path: Path) -> None:
    run, corpus, queries = inputs()
    run = pd.concat([run, pd.DataFrame({"qid": ["q01"], "doc_id": ["ghost"], "score": [9.0]})], ignore_index=True)
    reranker = CountingReranker(str(tmp_path / "log"), 0.0)
    memory = rerank_run(run, corpus, reranker, top_k=TOP_K, batch_size=BATCH, queries=queries, progress=False)
    folder = rerank_run(run, corpus, reranker, top_k=TOP_K, batch_size=BATCH, queries=queries, progress=False,
                        output=tmp_path / "job")
    pd.testing.assert_frame_equal(folder, memory, check_exact=True)
    assert folder.attrs["missing"] == memory.attrs["missing"] == [("q01", "ghost")]
    assert len(list((tmp_path / "job").glob("part-*.parquet"))) == N_CHUNKS
    # read_run reads the folder as it reads a run file; write_run turns it into TREC text
    write_run(tmp_path / "job", tmp_path / "run.trec")
    pd.testing.assert_frame_equal(read_run(tmp_path / "job"), read_run(tmp_path / "run.trec"))
    pd.testing.assert_frame_equal(read_run(tmp_path / "job").astype({"qid": str, "doc_id": str}),
                                  memory.astype({"qid": str, "doc_id": str}), check_exact=True)


def test_mmr_job_on_cranfield_equals_in_memory(tmp_path: Path, cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import presets

    queries = cranfield["queries"].head(12)
    run = presets.bm25(cranfield["corpus"]).search_batch(queries, limit=20).run
    mmr = MMRReranker(LSAEmbedder(cranfield["corpus"]["content"].tolist(), n_components=32), lambda_=0.6)
    want = rerank_run(run, cranfield["corpus"], mmr, top_k=10, queries=queries, progress=False)
    got = rerank_run(run, cranfield["corpus"], mmr, top_k=10, batch_size=5, queries=queries, progress=False,
                     output=tmp_path / "mmr")
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_resumed_after_a_failure_computes_only_what_is_missing(tmp_path: Path) -> None:
    log = tmp_path / "job.log"

    class FailsAtChunk(CountingReranker):
        def rerank_batch(self, items: Any) -> list[list[Any]]:
            if len(calls(log)) == 5:
                raise RuntimeError("model server went away")
            return super().rerank_batch(items)

    with pytest.raises(SearchError, match="model server went away"):
        job(tmp_path, "job", FailsAtChunk(str(log), 0.0))
    assert len(calls(log)) == 5 and len(list((tmp_path / "job").glob("part-*.json"))) == 5
    resumed = job(tmp_path, "job")
    assert len(calls(log)) == N_CHUNKS  # the five finished chunks were not computed again
    reference = job(tmp_path, "ref")
    pd.testing.assert_frame_equal(resumed, reference, check_exact=True)
    assert part_digests(tmp_path / "job") == part_digests(tmp_path / "ref")
    job(tmp_path, "job")  # finished: nothing is computed
    assert len(calls(log)) == N_CHUNKS


def test_another_job_is_refused_naming_what_differs(tmp_path: Path) -> None:
    job(tmp_path, "job")
    with pytest.raises(JobMismatchError, match=r"top_k differs \(recorded '4', now '3'\).*restart=True") as info:
        job(tmp_path, "job", top_k=3)
    assert set(info.value.differences) == {"top_k"}

    class Other(CountingReranker):
        def fingerprint(self) -> str:
            return "CountingReranker/2"

    with pytest.raises(JobMismatchError, match="reranker differs") as info:
        job(tmp_path, "job", Other(str(tmp_path / "other.log"), 0.0))
    assert set(info.value.differences) == {"reranker"}
    with pytest.raises(JobMismatchError) as info:
        job(tmp_path, "job", batch_size=5)
    assert set(info.value.differences) == {"batch_size", "n_parts"}
    run, corpus, queries = inputs()
    edited = corpus.assign(content=corpus["content"].where(corpus["id"] != "d7", "changed"))
    with pytest.raises(JobMismatchError) as info:
        rerank_run(run, edited, CountingReranker(str(tmp_path / "x.log"), 0.0), top_k=TOP_K, batch_size=BATCH,
                   queries=queries, progress=False, output=tmp_path / "job")
    assert set(info.value.differences) == {"corpus"}
    with pytest.raises(JobMismatchError) as info:
        rerank_run(run.assign(score=run["score"] * 2), corpus, CountingReranker(str(tmp_path / "x.log"), 0.0),
                   top_k=TOP_K, batch_size=BATCH, queries=queries, progress=False, output=tmp_path / "job")
    assert set(info.value.differences) == {"run"}
    restarted = job(tmp_path, "job", top_k=3, restart=True)
    assert len(calls(tmp_path / "job.log")) == 2 * N_CHUNKS and (restarted.groupby("qid").size() == 6).all()


def test_a_reranker_without_fingerprint_needs_one_given(tmp_path: Path) -> None:
    class Plain:
        def rerank(self, docs: Any, context: Any) -> list[Any]:
            return list(reversed(docs))

    with pytest.raises(KolmTypeError, match="declares no fingerprint.*pass fingerprint="):
        job(tmp_path, "plain", Plain())
    assert not (tmp_path / "plain").exists()
    out = job(tmp_path, "plain", Plain(), fingerprint="reverse/1")
    assert len(out) == N_QUERIES * 6
    with pytest.raises(KolmTypeError, match="non-empty string"):
        job(tmp_path, "plain2", Plain(), fingerprint="  ")


def test_a_damaged_part_is_recomputed_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reference = job(tmp_path, "job")
    part = tmp_path / "job" / "part-00004.parquet"
    data = bytearray(part.read_bytes())
    data[40] ^= 0x55
    part.write_bytes(bytes(data))
    again = job(tmp_path, "job")
    assert len(calls(tmp_path / "job.log")) == N_CHUNKS + 1 and "part 4 is damaged" in caplog.text
    pd.testing.assert_frame_equal(again, reference, check_exact=True)


def test_sigkill_at_any_point_then_resume_equals_an_uninterrupted_job(tmp_path: Path) -> None:
    """Three processes killed with SIGKILL at random moments (while the model runs, while a part
    is written), then one that finishes: the parts are byte for byte an uninterrupted job's, and
    each kill cost at most the one chunk in flight. (Processes fork from a forkserver that has
    the job's modules imported, so each starts at once.)"""
    import multiprocessing

    from tests.reliability import rerank_child

    reference = job(tmp_path, "ref")
    rng = np.random.default_rng(7)
    log = tmp_path / "job.log"
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.reliability.rerank_child"])
    args = (str(tmp_path / "job"), str(log), 0.02)
    for progress in (2, 6, 10):
        child = context.Process(target=rerank_child.job, args=args)
        child.start()
        deadline = time.monotonic() + 60
        while len(calls(log)) < progress and child.is_alive() and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(float(rng.uniform(0.0, 0.03)))  # anywhere in a chunk: computing, writing, renaming
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join(30)
        assert child.exitcode == -signal.SIGKILL
    last = context.Process(target=rerank_child.job, args=args)
    last.start()
    last.join(120)
    assert last.exitcode == 0
    assert part_digests(tmp_path / "job") == part_digests(tmp_path / "ref")
    pd.testing.assert_frame_equal(read_run(tmp_path / "job"), read_run(tmp_path / "ref"), check_exact=True)
    pd.testing.assert_frame_equal(job(tmp_path, "job"), reference, check_exact=True)
    assert N_CHUNKS <= len(calls(log)) <= N_CHUNKS + 3  # each kill lost at most its chunk in flight
    assert not [p.name for p in (tmp_path / "job").iterdir() if ".tmp-" in p.name]  # a killed write's leftovers went


def test_progress_on_stderr_and_silenced(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from kolm_search import _progress

    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress, "MININTERVAL", 0.0)
    run, corpus, queries = inputs()
    docs = corpus["content"].tolist()
    mmr = MMRReranker(LSAEmbedder(docs, n_components=8))
    rerank_run(run, corpus, mmr, top_k=TOP_K, batch_size=BATCH, queries=queries, progress=False)
    assert capsys.readouterr().err == ""
    rerank_run(run, corpus, mmr, top_k=TOP_K, batch_size=BATCH, queries=queries, progress=True,
               output=tmp_path / "job")
    err = capsys.readouterr().err  # tqdm's line: "rerank:  45%|...| 18/40 [00:00<00:00, 82.8q/s]"
    assert re.search(rf"rerank: +\d+%.*\d+/{N_QUERIES} \[\d\d:\d\d<\d\d:\d\d, +[\d.]+q/s\]", err), err


def test_embedding_shows_progress_from_the_first_batch(onnx_minilm: Any, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A corpus being embedded shows texts per second and the time left after its first batch
    (not only from 5,000 texts on); a job's progress=False silences the embedder it calls."""
    from kolm_search import _progress
    from kolm_search._progress import progress_scope

    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress, "MININTERVAL", 0.0)  # a quick batch still redraws the bar
    texts = [f"supersonic flow number {i} over a wedge" for i in range(40)]
    onnx_minilm.embed_many(texts)
    err = capsys.readouterr().err
    assert re.search(r"embed: +\d+%.*\d+/40 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+text/s\]", err), err
    with progress_scope(False):
        onnx_minilm.embed_many(texts)
    assert capsys.readouterr().err == ""
    run, corpus, queries = inputs()
    rerank_run(run, corpus, MMRReranker(onnx_minilm), top_k=TOP_K, batch_size=BATCH, queries=queries, progress=False)
    assert capsys.readouterr().err == ""
