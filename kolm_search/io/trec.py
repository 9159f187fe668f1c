"""TREC run and qrels files (plain or ``.gz``) and parquet, read and written exactly.

Run file lines: ``qid Q0 doc_id rank score tag``; qrels lines: ``qid iteration doc_id
relevance`` (or BEIR's ``query-id corpus-id score`` with its header). In DataFrames runs are
``qid, doc_id, rank, score`` with a zero-based rank (a file's 1-based rank minus one) and qrels
are ``qid, doc_id, relevance`` (:mod:`kolm_search.runs`). The readers return the ids as
categoricals, so fusion and evaluation take their codes without hashing the ids again. Scores
are written with ``repr`` precision, so a round trip is exact.

Files are parsed by pandas' C reader; when that fails or a value is out of place, the file is
read again line by line to name the file and the line of the first problem. A byte-order mark
is ignored; bytes that are not UTF-8, a truncated or corrupt ``.gz`` and a file that is not
where it is said to be are :class:`~kolm_search.errors.FrameValidationError` or
:class:`~kolm_search.errors.KolmValueError` naming the file.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.io._text import BROKEN, text_lines
from kolm_search.runs import (
    QRELS_COLUMNS,
    RUN_COLUMNS,
    as_qrels,
    as_run,
    check_ids,
    numeric_column,
    relevance_column,
)

__all__ = ["read_qrels", "read_run", "write_qrels", "write_run"]

_RUN_FIELDS = ["qid", "q0", "doc_id", "rank", "score", "tag"]
_HEADERS = ("query-id", "qid", "query_id")


def _open(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return path.open(mode, encoding="utf-8")


def _is_parquet(path: Path) -> bool:
    return path.suffix in (".parquet", ".pq")


def _existing(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise KolmValueError(f"{what} file {str(p)!r} does not exist" if not p.exists() else
                             f"{what} path {str(p)!r} is not a file")
    return p


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of every non-blank line."""
    for lineno, line in text_lines(path):
        fields = line.split()
        if fields:
            yield lineno, fields


def _read_csv(path: Path, names: list[str], dtype: dict[str, Any], skip: int = 0) -> pd.DataFrame:
    return pd.read_csv(path, sep=r"\s+", header=None, names=names, dtype=dtype, skiprows=skip, engine="c",
                       na_filter=False, quoting=csv.QUOTE_NONE, encoding="utf-8-sig", compression="infer",
                       skip_blank_lines=True)


def _scan_run(path: Path) -> pd.DataFrame:
    """The run read line by line (the slow path): raises naming the first malformed line."""
    rows = []
    for lineno, parts in _lines(path):
        if len(parts) != 6:
            raise FrameValidationError(f"{path}:{lineno}: expected 6 fields 'qid Q0 doc rank score tag', got {len(parts)}")
        try:
            int(parts[3])
        except ValueError as exc:
            raise FrameValidationError(f"{path}:{lineno}: rank {parts[3]!r} is not an integer") from exc
        try:
            score = float(parts[4])
        except ValueError as exc:
            raise FrameValidationError(f"{path}:{lineno}: score {parts[4]!r} is not a number") from exc
        if not np.isfinite(score):
            raise FrameValidationError(f"{path}:{lineno}: score {parts[4]!r} is not finite")
        rows.append((parts[0], parts[2], int(parts[3]) - 1, score))
    frame = pd.DataFrame(rows, columns=list(RUN_COLUMNS)).astype({"rank": np.int64, "score": np.float64})
    return _categorical_ids(frame)


def _categorical_ids(frame: pd.DataFrame) -> pd.DataFrame:
    for column in ("qid", "doc_id"):
        if not isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype("category")
    return frame


def _no_duplicates(frame: pd.DataFrame, path: Path, what: str) -> None:
    dup = frame.duplicated(["qid", "doc_id"])
    if dup.any():
        row = frame[dup].iloc[0]
        raise FrameValidationError(f"{path}: {what} {row.doc_id!r} appears twice for query {row.qid!r}")


def read_run(path: str | Path) -> pd.DataFrame:
    """Read a TREC run file (or parquet) into ``qid, doc_id, rank, score``.

    Returns
    -------
    DataFrame
        ``qid`` and ``doc_id`` categorical, ``rank`` int64 zero-based, ``score`` float64.

    Raises
    ------
    FrameValidationError
        Naming file and line for a malformed line, a non-numeric or non-finite score, a
        non-integer rank, undecodable bytes or a corrupt ``.gz``; naming the document and
        query when a document is repeated for one query.
    KolmValueError
        The file does not exist.
    """
    p = _existing(path, "run")
    if _is_parquet(p):
        frame = _read_parquet(p, "run")
        frame = as_run(frame, what=f"run {str(p)!r}")
        check_ids(frame, f"run {str(p)!r}")
        frame["score"] = numeric_column(frame, "score", f"run {str(p)!r}", finite=True)
        if "rank" in frame.columns:
            frame["rank"] = numeric_column(frame, "rank", f"run {str(p)!r}", finite=True).astype(np.int64)
        frame = _categorical_ids(frame)
    else:
        dtypes = {"qid": str, "q0": str, "doc_id": str, "rank": np.int64, "score": np.float64, "tag": str}
        try:
            raw = _read_csv(p, _RUN_FIELDS, dtypes)
            ok = not (raw["tag"] == "").any() and bool(np.isfinite(raw["score"].to_numpy()).all())
        except (ValueError, pd.errors.ParserError, *BROKEN):
            ok = False
        frame = _scan_run(p) if not ok else _categorical_ids(pd.DataFrame({
            "qid": raw["qid"], "doc_id": raw["doc_id"], "rank": raw["rank"].to_numpy() - 1, "score": raw["score"].to_numpy()}))
    _no_duplicates(frame, p, "document")
    return frame


def _read_parquet(path: Path, what: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many kinds for a file that is not parquet
        raise FrameValidationError(f"{path}: cannot read the {what} as parquet ({type(exc).__name__}: {exc})") from exc


def write_run(run: Any, path: str | Path, tag: str = "kolm_search") -> None:
    """Write ``qid, doc_id, score[, rank]`` as a TREC run (or parquet by extension)."""
    df = as_run(run)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if _is_parquet(p):
        df.to_parquet(p, index=False)
        return
    if any(c.isspace() for c in tag) or not tag:
        raise KolmValueError(f"run tag must be one word, got {tag!r}")
    score = numeric_column(df, "score", "run", finite=True)
    if "rank" in df.columns:
        rank = numeric_column(df, "rank", "run", finite=True).astype(np.int64) + 1
    else:
        rank = df.groupby("qid", sort=False, observed=True).cumcount().to_numpy(np.int64) + 1
    with _open(p, "w") as fh:
        for q, d, r, s in zip(df["qid"].astype(str), df["doc_id"].astype(str), rank, score, strict=True):
            if not q or not d or any(ch.isspace() for ch in q + d):
                raise FrameValidationError(f"ids must be non-empty and without white space: qid {q!r}, doc_id {d!r}")
            fh.write(f"{q} Q0 {d} {int(r)} {float(s)!r} {tag}\n")


def _scan_qrels(path: Path) -> pd.DataFrame:
    """The qrels read line by line (the slow path; 3 and 4 fields may mix): raises naming the
    first malformed line."""
    rows = []
    for lineno, parts in _lines(path):
        if lineno == 1 and parts[0] in _HEADERS:
            continue
        if len(parts) not in (3, 4):
            raise FrameValidationError(
                f"{path}:{lineno}: expected 3 or 4 fields ('qid doc rel' or 'qid iter doc rel'), got {len(parts)}")
        try:
            rel = int(parts[-1])
        except ValueError as exc:
            raise FrameValidationError(f"{path}:{lineno}: relevance {parts[-1]!r} is not an integer") from exc
        if not -2**31 <= rel < 2**31:
            raise FrameValidationError(f"{path}:{lineno}: relevance {parts[-1]} does not fit int32")
        rows.append((parts[0], parts[-2], rel))
    frame = pd.DataFrame(rows, columns=list(QRELS_COLUMNS)).astype({"relevance": np.int64})
    return _categorical_ids(frame)


def read_qrels(path: str | Path) -> pd.DataFrame:
    """Read TREC qrels (4 fields), BEIR tsv (3 fields, header optional) or parquet.

    Returns
    -------
    DataFrame
        ``qid, doc_id`` categorical, ``relevance`` int64 (grades within int32).
    """
    p = _existing(path, "qrels")
    if _is_parquet(p):
        frame = _read_parquet(p, "qrels")
        frame = as_qrels(frame, what=f"qrels {str(p)!r}")
        check_ids(frame, f"qrels {str(p)!r}")
        frame["relevance"] = relevance_column(frame, f"qrels {str(p)!r}")
        frame = _categorical_ids(frame)
    else:
        first = next(_lines(p), None)
        if first is None:
            frame = _scan_qrels(p)
        else:
            header = first[0] == 1 and first[1][0] in _HEADERS
            width = len(first[1]) if not header else 3
            names = ["qid", "iteration", "doc_id", "relevance"] if width == 4 else ["qid", "doc_id", "relevance"]
            dtypes = {"qid": str, "iteration": str, "doc_id": str, "relevance": np.int64}
            try:
                raw = _read_csv(p, names, dtypes, skip=first[0] if header else 0)
                rel = raw["relevance"].to_numpy()
                ok = width in (3, 4) and bool(((rel >= -2**31) & (rel < 2**31)).all())
            except (ValueError, pd.errors.ParserError, *BROKEN):
                ok = False
            frame = _scan_qrels(p) if not ok else _categorical_ids(pd.DataFrame(
                {"qid": raw["qid"], "doc_id": raw["doc_id"], "relevance": rel.astype(np.int64)}))
    dup = frame.duplicated(["qid", "doc_id"])
    if dup.any():
        row = frame[dup].iloc[0]
        raise FrameValidationError(f"{p}: duplicate judgement for query {row.qid!r}, document {row.doc_id!r}")
    return frame


def write_qrels(qrels: Any, path: str | Path) -> None:
    """Write ``qid, doc_id, relevance`` as TREC qrels (or parquet by extension)."""
    df = as_qrels(qrels)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if _is_parquet(p):
        df.to_parquet(p, index=False)
        return
    rel = relevance_column(df)
    with _open(p, "w") as fh:
        for q, d, r in zip(df["qid"].astype(str), df["doc_id"].astype(str), rel, strict=True):
            if not q or not d or any(ch.isspace() for ch in q + d):
                raise FrameValidationError(f"ids must be non-empty and without white space: qid {q!r}, doc_id {d!r}")
            fh.write(f"{q} 0 {d} {int(r)}\n")
