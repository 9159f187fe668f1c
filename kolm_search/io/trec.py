"""TREC run and qrels files (plain or ``.gz``) and parquet, read and written exactly.

Run file lines: ``qid Q0 doc_id rank score tag``; qrels lines: ``qid iteration doc_id
relevance``. In DataFrames runs are ``qid, doc_id, rank, score`` with a zero-based rank (a
file's 1-based rank minus one) and qrels are ``qid, doc_id, relevance``. Scores are written
with ``repr`` precision, so a round trip is exact.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmValueError

__all__ = ["read_qrels", "read_run", "write_qrels", "write_run"]


def _open(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return path.open(mode, encoding="utf-8")


def _is_parquet(path: Path) -> bool:
    return path.suffix in (".parquet", ".pq")


def read_run(path: str | Path) -> pd.DataFrame:
    """Read a TREC run file (or parquet) into ``qid, doc_id, rank, score``.

    Raises ``FrameValidationError`` naming file and line for a malformed line, a
    non-numeric score or rank, or a document repeated for one query.
    """
    p = Path(path)
    if not p.exists():
        raise KolmValueError(f"run file {str(p)!r} does not exist")
    if _is_parquet(p):
        df = pd.read_parquet(p)
        missing = [c for c in ("qid", "doc_id", "score") if c not in df.columns]
        if missing:
            raise FrameValidationError(f"{p}: parquet run lacks column(s) {missing}")
        return df
    qids, docs, ranks, scores = [], [], [], []
    with _open(p, "r") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise FrameValidationError(f"{p}:{lineno}: expected 6 fields 'qid Q0 doc rank score tag', got {len(parts)}")
            try:
                rank = int(parts[3])
            except ValueError as exc:
                raise FrameValidationError(f"{p}:{lineno}: rank {parts[3]!r} is not an integer") from exc
            try:
                score = float(parts[4])
            except ValueError as exc:
                raise FrameValidationError(f"{p}:{lineno}: score {parts[4]!r} is not a number") from exc
            if not np.isfinite(score):
                raise FrameValidationError(f"{p}:{lineno}: score {parts[4]!r} is not finite")
            qids.append(parts[0])
            docs.append(parts[2])
            ranks.append(rank - 1)
            scores.append(score)
    df = pd.DataFrame({"qid": qids, "doc_id": docs, "rank": np.asarray(ranks, np.int64), "score": np.asarray(scores, np.float64)})
    dup = df.duplicated(["qid", "doc_id"])
    if dup.any():
        row = df[dup].iloc[0]
        raise FrameValidationError(f"{p}: document {row.doc_id!r} appears twice for query {row.qid!r}")
    return df


def write_run(run: Any, path: str | Path, tag: str = "kolm_search") -> None:
    """Write ``qid, doc_id, score[, rank]`` as a TREC run (or parquet by extension)."""
    df = run.run if hasattr(run, "run") and isinstance(run.run, pd.DataFrame) else run
    if not isinstance(df, pd.DataFrame):
        raise FrameValidationError(f"expected a run DataFrame, got {type(df).__name__}")
    missing = [c for c in ("qid", "doc_id", "score") if c not in df.columns]
    if missing:
        raise FrameValidationError(f"run lacks column(s) {missing}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if _is_parquet(p):
        df.to_parquet(p, index=False)
        return
    if any(c.isspace() for c in tag) or not tag:
        raise KolmValueError(f"run tag must be one word, got {tag!r}")
    if "rank" in df.columns:
        rank = df["rank"].to_numpy(np.int64) + 1
    else:
        rank = df.groupby("qid", sort=False).cumcount().to_numpy(np.int64) + 1
    with _open(p, "w") as fh:
        for q, d, r, s in zip(df["qid"].astype(str), df["doc_id"].astype(str), rank, df["score"].to_numpy(np.float64), strict=True):
            if any(ch.isspace() for ch in q + d):
                raise FrameValidationError(f"ids must not contain white space: qid {q!r}, doc_id {d!r}")
            fh.write(f"{q} Q0 {d} {int(r)} {float(s)!r} {tag}\n")


def read_qrels(path: str | Path) -> pd.DataFrame:
    """Read TREC qrels (4 fields), BEIR tsv (3 fields with header) or parquet."""
    p = Path(path)
    if not p.exists():
        raise KolmValueError(f"qrels file {str(p)!r} does not exist")
    if _is_parquet(p):
        return pd.read_parquet(p)
    rows = []
    with _open(p, "r") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            if lineno == 1 and parts[0] in ("query-id", "qid", "query_id"):
                continue
            if len(parts) == 4:
                q, d, r = parts[0], parts[2], parts[3]
            elif len(parts) == 3:
                q, d, r = parts
            else:
                raise FrameValidationError(f"{p}:{lineno}: expected 3 or 4 fields ('qid doc rel' or 'qid iter doc rel'), got {len(parts)}")
            try:
                rel = int(r)
            except ValueError as exc:
                raise FrameValidationError(f"{p}:{lineno}: relevance {r!r} is not an integer") from exc
            rows.append((q, d, rel))
    df = pd.DataFrame(rows, columns=["qid", "doc_id", "relevance"]).astype({"relevance": "int64"})
    dup = df.duplicated(["qid", "doc_id"])
    if dup.any():
        row = df[dup].iloc[0]
        raise FrameValidationError(f"{p}: duplicate judgement for query {row.qid!r}, document {row.doc_id!r}")
    return df


def write_qrels(qrels: pd.DataFrame, path: str | Path) -> None:
    """Write ``qid, doc_id, relevance`` as TREC qrels (or parquet by extension)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if _is_parquet(p):
        qrels.to_parquet(p, index=False)
        return
    with _open(p, "w") as fh:
        for q, d, r in zip(qrels["qid"].astype(str), qrels["doc_id"].astype(str), qrels["relevance"], strict=True):
            fh.write(f"{q} 0 {d} {int(r)}\n")
