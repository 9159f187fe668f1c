"""Batch re-ranking jobs: read a run, re-rank each query's top-k with any Reranker, write a run.

A job goes through the run in chunks of ``batch_size`` queries (:mod:`kolm_search.jobs.rerank_plan`).
Given ``output=PATH`` it is resumable: each finished chunk is written, atomically, as a part of
a parquet dataset under ``PATH`` with a manifest recording the job's fingerprint (the run, the
query texts, the documents re-ranked, the reranker's fingerprint, ``top_k``, ``batch_size``;
:mod:`kolm_search.io.parts`). Started again with the same arguments it computes only the parts
not yet written (a process killed at any point loses at most the chunk it was computing) and
returns what an uninterrupted job returns, bit for bit; with other arguments it refuses, naming
what differs, unless ``restart=True``. ``kolm_search.io.read_run(PATH)`` reads the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search._bridge import run_sync
from kolm_search._params import boolean, positive_int
from kolm_search._progress import progress_bar, progress_scope
from kolm_search.contract.port_calls import fingerprint_of
from kolm_search.jobs.rerank_plan import RerankJob, empty_run

__all__ = ["rerank_run"]


def rerank_run(run: Any, corpus: Any, reranker: Any, top_k: int = 100, batch_size: int = 1000, *,
               queries: Any = None, progress: bool = True, output: str | Path | None = None, restart: bool = False,
               fingerprint: str | None = None, score_cache: Any = None) -> pd.DataFrame:
    """Re-rank the top ``top_k`` of every query of a run.

    Parameters
    ----------
    run : DataFrame ``qid, doc_id, score[, rank]``, BatchResult, or TREC run path
    corpus : Dataset, DataFrame ``id, content[, title]``, DocumentTable or documents
    reranker : Reranker
        Any object with ``rerank(docs, context)`` (sync or async), called as the pipeline's
        reranker stage calls it (:func:`kolm_search.contract.reranking.rerank_all`): a
        :class:`~kolm_search.contract.ports.BatchReranker` (``MMRReranker``, ``CrossEncoderReranker``,
        the LLM rerankers) gets each chunk of queries in one ``rerank_batch`` call, so its model
        sees every distinct document (MMR) or pair (cross-encoder) of the chunk once, in full
        batches; other rerankers are called per query, concurrently.
    top_k : int
        Documents re-ranked per query; those below keep their order under the block.
    batch_size : int
        Queries per chunk: only one chunk's documents are materialised at a time, and with
        ``output`` each chunk is one part (what a killed job can lose).
    queries : DataFrame ``qid, query`` or dict, optional
        Query texts (taken from ``corpus`` when it is a Dataset).
    progress : bool
        Progress on stderr (chunks, and the models' own phases: embedding, scoring).
    output : path, optional
        A folder (new, or of this same job) to write the run into as parts, resumably.
    restart : bool, default False
        With ``output``: start over in a folder holding another job's (or this job's) parts.
    fingerprint : str, optional
        What the reranker is, for ``output`` and ``score_cache``, when it declares no
        ``fingerprint()`` (:class:`~kolm_search.contract.ports.Fingerprinted`; the built-in rerankers do).
    score_cache : ScoreCache, optional
        Scores already computed (by any job, experiment or notebook) are read, not computed
        again (:class:`~kolm_search.adapters.CachedReranker`; the reranker must score pairs or
        rank windows).

    Returns
    -------
    DataFrame ``qid, doc_id, rank, score``
        New ranks; scores are the reranker's when it gives non-increasing scores to the
        block, else ``len - rank``; documents below keep their order with lower scores.
        Documents missing from the corpus cannot be re-ranked: they stay, right after the
        re-ranked block, and are listed in ``result.attrs["missing"]`` (and logged).

    Raises
    ------
    JobMismatchError
        ``output`` holds another job's parts (what differs is named) and ``restart`` is false.
    KolmTypeError
        ``output`` or ``score_cache`` with a reranker that has no fingerprint, and none given.
    """
    top_k = positive_int("top_k", top_k)
    batch_size = positive_int("batch_size", batch_size)
    boolean("progress", progress)
    boolean("restart", restart)
    job = RerankJob.build(run, corpus, queries, top_k, batch_size)
    if score_cache is not None:
        from kolm_search.adapters.scoring import with_score_cache

        reranker = with_score_cache(reranker, score_cache, fingerprint)
    with progress_scope(progress):
        if output is None:
            frames = []
            with progress_bar(len(job.qids), "rerank", "q") as bar:
                for i in range(job.n_chunks):
                    frames.append(run_sync(job.compute(i, reranker)))
                    bar.update(len(job.chunk(i)))
            return job.finish(pd.concat(frames, ignore_index=True) if frames else empty_run())
        from kolm_search.io.parts import PartsFolder

        folder = PartsFolder(output, kind="rerank_run", fingerprint=job.fingerprint(fingerprint_of(reranker, fingerprint)),
                             n_parts=job.n_chunks, restart=restart)
        with folder.lock():
            done = set(folder.done())
            with progress_bar(len(job.qids), "rerank", "q", initial=sum(len(job.chunk(i)) for i in done)) as bar:
                for i in range(job.n_chunks):
                    if i not in done:
                        folder.write(i, run_sync(job.compute(i, reranker)))
                        bar.update(len(job.chunk(i)))
            result = folder.read() if job.n_chunks else empty_run()
    return job.finish(result)
