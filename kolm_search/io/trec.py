"""TREC run and qrels files (plain or ``.gz``) and parquet, read and written exactly.

Run file lines: ``qid Q0 doc_id rank score tag``; qrels lines: ``qid iteration doc_id
relevance`` (or BEIR's ``query-id corpus-id score`` with its header). In DataFrames runs are
``qid, doc_id, rank, score`` with a zero-based rank (a file's 1-based rank minus one) and qrels
are ``qid, doc_id, relevance`` (:mod:`kolm_search.engine.runs`). The readers return query ids as
categoricals (coded once, here); run document ids are Arrow strings (a categorical of millions of
distinct documents would cost pandas a second pass over them, more than the read itself) and
qrels document ids categoricals. Scores
are written with ``repr`` precision, so a round trip is exact.

Run files are parsed by pyarrow's CSV reader (:mod:`kolm_search.io._arrow_trec`: one space
between fields, on every core); a run file it cannot take as it is, and qrels, by pandas' C
reader; when that fails or a value is out of place, the file is read again line by line to name
the file and the line of the first problem. Writes are all or nothing: a temporary file beside
the target, renamed over it once complete. Big files show a progress bar on stderr
(``progress=False`` silences it). A byte-order mark
is ignored; bytes that are not UTF-8, a truncated or corrupt ``.gz`` and a file that is not
where it is said to be are :class:`~kolm_search.errors.FrameValidationError` or
:class:`~kolm_search.errors.KolmValueError` naming the file.
"""

from __future__ import annotations

import csv
import gzip
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from kolm_search._params import path_exists
from kolm_search.engine.ids import str_id
from kolm_search.engine.runs import (
    QRELS_COLUMNS,
    RUN_COLUMNS,
    as_qrels,
    as_run,
    check_ids,
    numeric_column,
    relevance_column,
)
from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.io._arrow_trec import read_run_arrow, write_run_arrow
from kolm_search.io._atomic import replacing
from kolm_search.io._parquet import check_parquet_columns, rank_column, read_parquet, to_parquet
from kolm_search.io._text import BROKEN, holds_any, text_lines

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
    return path_exists(f"{what} file", path, kind="file")


_SPACE = re.compile(r"[ \t]+")  # fields are separated by spaces and tabs only, as pandas' C reader does
_C_SPACE = (b"\x0b", b"\x0c")  # white space to C's isspace but no separator: pandas' number parsers skip it
_LINE_END = re.compile(r"\r\n?|\n")  # and lines end at \n, \r\n or a lone \r
_INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII digits: no "1_0", no other scripts' digits
_NUMBER = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of every non-blank line."""
    for lineno, line in text_lines(path):
        for piece in _LINE_END.split(line):
            fields = _SPACE.split(piece.strip(" \t"))
            if fields != [""]:
                yield lineno, fields


def _number(text: str) -> float | None:
    """A decimal number as pandas' C reader reads one (``1``, ``-.5e3``, ``inf``; ``nan`` too), else None."""
    return float(text) if _NUMBER.fullmatch(text) else None


def _integer(text: str) -> int | None:
    """An integer as pandas' C reader reads one into int64 (``+1``, ``01``, and integral
    decimals such as ``1.0`` or ``1e3``), else None."""
    if _INTEGER.fullmatch(text):
        return int(text)
    value = _number(text)
    return int(value) if value is not None and np.isfinite(value) and value == int(value) else None


def _read_csv(path: Path, names: list[str], dtype: dict[str, Any], skip: int = 0) -> pd.DataFrame:
    """The file by pandas' C reader, with one more column than ``names`` that must stay empty
    (pandas would otherwise turn a surplus leading field into the index)."""
    with warnings.catch_warnings():  # surplus fields or casts that fail are refused below or by the line scan
        warnings.simplefilter("ignore", pd.errors.ParserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        frame = pd.read_csv(path, sep=r"\s+", header=None, names=[*names, "_extra"], dtype={**dtype, "_extra": str},
                            skiprows=skip, engine="c", na_filter=False, quoting=csv.QUOTE_NONE, encoding="utf-8",
                            compression="infer", skip_blank_lines=True, index_col=False)
    if (frame["_extra"] != "").any():
        raise ValueError("a line has more fields than expected")
    if holds_any(path, _C_SPACE):  # pandas' numbers skip them ("\v1" read as 1): the line scan refuses a field so
        raise ValueError("a vertical tab or form feed")
    return frame


def _scan_run(path: Path) -> pd.DataFrame:
    """The run read line by line (the slow path): raises naming the first malformed line."""
    rows = []
    for lineno, parts in _lines(path):
        if len(parts) != 6:
            raise FrameValidationError(f"{path}:{lineno}: expected 6 fields 'qid Q0 doc rank score tag', got {len(parts)}")
        rank = _integer(parts[3])
        if rank is None:
            raise FrameValidationError(f"{path}:{lineno}: rank {parts[3]!r} is not an integer")
        if not -2**63 < rank < 2**63:
            raise FrameValidationError(f"{path}:{lineno}: rank {parts[3]} does not fit int64")
        score = _number(parts[4])
        if score is None:
            raise FrameValidationError(f"{path}:{lineno}: score {parts[4]!r} is not a number")
        if not np.isfinite(score):
            raise FrameValidationError(f"{path}:{lineno}: score {parts[4]!r} is not finite")
        rows.append((parts[0], parts[2], rank - 1, score))
    frame = pd.DataFrame(rows, columns=list(RUN_COLUMNS)).astype({"rank": np.int64, "score": np.float64})
    return _run_ids(frame)


def _categorical_ids(frame: pd.DataFrame) -> pd.DataFrame:
    for column in ("qid", "doc_id"):
        if not isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype("category")
    return frame


def _run_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """A run's ids as read_run gives them: ``qid`` categorical, ``doc_id`` strings (those of a
    parquet file that are not strings are kept as they are: integers stay integers)."""
    if not isinstance(frame["qid"].dtype, pd.CategoricalDtype):  # categories in order of appearance, as the text reader's
        codes, uniques = pd.factorize(frame["qid"])
        frame["qid"] = pd.Categorical.from_codes(codes, categories=uniques)
    doc = frame["doc_id"]
    if isinstance(doc.dtype, pd.CategoricalDtype):
        doc = doc.astype(doc.cat.categories.dtype)
    if pd.api.types.infer_dtype(doc, skipna=False) == "string":
        try:
            doc = doc.astype("str")
        except UnicodeError:  # lone surrogates, which Arrow strings cannot hold, stay Python strings
            doc = doc.astype(object)
    frame["doc_id"] = doc
    return frame


def _no_duplicates(frame: pd.DataFrame, path: Path, what: str) -> None:
    dup = frame.duplicated(["qid", "doc_id"])
    if dup.any():
        row = frame[dup].iloc[0]
        raise FrameValidationError(f"{path}: {what} {row.doc_id!r} appears twice for query {row.qid!r}")


def read_run(path: str | Path, *, progress: bool | None = None, check_duplicates: bool = True) -> pd.DataFrame:
    """Read a TREC run file, a parquet file, or the folder of a resumable job (its parts, each
    checked against its recorded digest; :mod:`kolm_search.io.parts`) into ``qid, doc_id, rank, score``.

    Parameters
    ----------
    path : str or Path
        TREC text (``.gz`` too), parquet, or a finished resumable job's folder.
    progress : bool, optional
        A progress bar on stderr; None (default) shows one for files above 256 MiB.
    check_duplicates : bool
        Refuse a document given twice for one query (default). False leaves that check to
        the caller, for a run going straight to a function that refuses duplicates itself
        (:func:`~kolm_search.evaluate` does; ``kolm-search eval`` reads its runs so).

    Returns
    -------
    DataFrame
        ``qid`` categorical, ``doc_id`` strings (integers of a parquet file stay integers),
        ``rank`` int64 zero-based, ``score`` float64.

    Raises
    ------
    FrameValidationError
        Naming file and line for a malformed line, a non-numeric or non-finite score, a
        non-integer rank, undecodable bytes or a corrupt ``.gz``; naming the document and
        query when a document is repeated for one query.
    KolmValueError
        The file does not exist; a job folder is not finished or holds a damaged part.
    """
    from kolm_search.io.parts import PartsFolder, is_parts_folder

    folder = is_parts_folder(path)
    p = Path(path) if folder else _existing(path, "run")
    if folder or _is_parquet(p):
        what = f"run {str(p)!r}"
        frame = PartsFolder.open_existing(p).read() if folder else read_parquet(p, "run")
        frame = as_run(frame, what=what)
        check_parquet_columns(frame, what, ("score", "rank"))
        frame["score"] = numeric_column(frame, "score", what, finite=True)
        if "rank" in frame.columns:
            frame["rank"] = rank_column(frame, what)
        frame = _run_ids(frame)
    else:
        fast = read_run_arrow(p, progress, check_duplicates)
        return fast if fast is not None else read_run_text(p, check_duplicates)
    _no_duplicates(frame, p, "document")
    return frame


def read_run_text(p: Path, check_duplicates: bool = True) -> pd.DataFrame:
    """A TREC run file by the general reader: fields split at runs of spaces and tabs by pandas'
    C parser, or line by line when that fails (to name the line); what :func:`read_run` falls
    back to when pyarrow's fast path cannot take the file as it is."""
    dtypes = {"qid": str, "q0": str, "doc_id": str, "rank": np.int64, "score": np.float64, "tag": str}
    try:
        raw = _read_csv(p, _RUN_FIELDS, dtypes)
        ok = (not (raw["tag"] == "").any() and bool(np.isfinite(raw["score"].to_numpy()).all())
              and bool((raw["rank"].to_numpy() > np.iinfo(np.int64).min).all()))  # rank - 1 must fit
    except (ValueError, OverflowError, pd.errors.ParserError, *BROKEN):
        ok = False
    frame = _scan_run(p) if not ok else _run_ids(pd.DataFrame({
        "qid": raw["qid"], "doc_id": raw["doc_id"], "rank": raw["rank"].to_numpy() - 1, "score": raw["score"].to_numpy()}))
    if check_duplicates:
        _no_duplicates(frame, p, "document")
    return frame


def write_run(run: Any, path: str | Path, tag: str = "kolm_search", *, progress: bool | None = None) -> None:
    """Write ``qid, doc_id, score[, rank]`` as a TREC run (or parquet by extension), all or
    nothing; ``progress``: a bar on stderr (None: for runs above 4M rows). ``run`` may be a frame
    or anything :func:`read_run` reads (a resumable job's folder: ``write_run("job/", "run.trec")``)."""
    if isinstance(run, (str, os.PathLike)):
        run = read_run(os.fspath(run))
    df = as_run(run)
    check_ids(df, "run")  # a missing id would be written as "nan"
    p = Path(path)
    if _is_parquet(p):
        with replacing(p) as tmp:
            to_parquet(df, tmp)
        return
    if not isinstance(tag, str) or not tag or any(c.isspace() for c in tag) or not tag.isprintable():
        raise KolmValueError(f"run tag must be one word, got {tag!r}")
    score = numeric_column(df, "score", "run", finite=True)
    if "rank" in df.columns:
        rank = rank_column(df, "run") + 1
    else:
        rank = df.groupby("qid", sort=False, observed=True).cumcount().to_numpy(np.int64) + 1
    with replacing(p) as tmp:
        if write_run_arrow(df["qid"], df["doc_id"], rank, score, tag, tmp, progress, p.name):
            return
        qids, docs = _text_ids(df, "run")  # names the id the fast path could not write
        with _open(tmp, "w") as fh:
            for q, d, r, s in zip(qids, docs, rank.tolist(), score.tolist(), strict=True):
                fh.write(f"{q} Q0 {d} {r} {s!r} {tag}\n")


def _is_header(fields: list[str]) -> bool:
    """BEIR's ``query-id corpus-id score``: a first line whose first field names the column and
    whose last is not a grade (a query called ``qid`` with a grade is a judgement)."""
    return fields[0] in _HEADERS and _integer(fields[-1]) is None


def _text_ids(df: pd.DataFrame, what: str) -> tuple[list[str], list[str]]:
    """The ids as they will be written: strings, non-empty, without white space, UTF-8, not
    starting with a byte-order mark; bytes are refused (``str(b"x")`` is not ``x``)."""
    out = []
    for column in ("qid", "doc_id"):
        values = [str_id(v) for v in df[column].astype(object).tolist()]
        for row, v in enumerate(values):
            if not v or any(ch.isspace() for ch in v) or v.startswith("\ufeff"):
                raise FrameValidationError(f"{what} {column} at row {row} is {v!r}; ids must be non-empty, "
                                           "without white space and not start with a byte-order mark")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise FrameValidationError(f"{what} {column} at row {row} is {v!r}, not UTF-8 text") from exc
        out.append(values)
    return out[0], out[1]


def _scan_qrels(path: Path, subtopics: bool = False) -> pd.DataFrame:
    """The qrels read line by line (the slow path; 3 and 4 fields may mix unless ``subtopics``):
    raises naming the first malformed line."""
    rows = []
    for at, (lineno, parts) in enumerate(_lines(path)):
        if at == 0 and lineno == 1 and _is_header(parts):
            continue
        if subtopics and len(parts) != 4:
            raise FrameValidationError(f"{path}:{lineno}: subtopic qrels have 4 fields 'qid subtopic doc rel', "
                                       f"got {len(parts)}")
        if len(parts) not in (3, 4):
            raise FrameValidationError(
                f"{path}:{lineno}: expected 3 or 4 fields ('qid doc rel' or 'qid iter doc rel'), got {len(parts)}")
        rel = _integer(parts[-1])
        if rel is None:
            raise FrameValidationError(f"{path}:{lineno}: relevance {parts[-1]!r} is not an integer")
        if not -2**31 <= rel < 2**31:
            raise FrameValidationError(f"{path}:{lineno}: relevance {parts[-1]} does not fit int32")
        rows.append((parts[0], parts[-2], rel, parts[1] if len(parts) == 4 else "0"))
    frame = pd.DataFrame(rows, columns=[*QRELS_COLUMNS, "subtopic"]).astype({"relevance": np.int64})
    return _categorical_ids(frame if subtopics else frame.drop(columns="subtopic"))


def read_qrels(path: str | Path, *, subtopics: bool = False) -> pd.DataFrame:
    """Read TREC qrels (4 fields), BEIR tsv (3 fields, header optional) or parquet.

    ``subtopics=True`` reads diversity qrels (trec_eval's and ndeval's ``qid subtopic doc rel``,
    the second field the subtopic; a parquet file's ``subtopic`` or ``iteration`` column) into a
    ``subtopic`` column: a document may then be judged once per subtopic, for the diversity
    measures (``alpha_nDCG@k``, ``ERR_IA@k``, :mod:`kolm_search.evaluation.diversity`).

    Returns
    -------
    DataFrame
        ``qid, doc_id`` categorical, ``relevance`` int64 (grades within int32) (and ``subtopic``,
        categorical).
    """
    p = _existing(path, "qrels")
    if _is_parquet(p):
        what = f"qrels {str(p)!r}"
        frame = read_parquet(p, "qrels")
        frame = as_qrels(frame, what=what)
        check_parquet_columns(frame, what, ("relevance",))
        frame["relevance"] = relevance_column(frame, what)
        if subtopics:
            column = next((c for c in ("subtopic", "iteration") if c in frame.columns), None)
            if column is None:
                raise FrameValidationError(f"{what} has no subtopic (or iteration) column; columns: "
                                           f"{list(frame.columns)}")
            frame = frame.rename(columns={column: "subtopic"})
            frame["subtopic"] = frame["subtopic"].astype(str).astype("category")
        frame = _categorical_ids(frame)
    else:
        first = next(_lines(p), None)
        if first is None:
            frame = _scan_qrels(p, subtopics)
        else:
            header = first[0] == 1 and _is_header(first[1])
            width = len(first[1]) if not header else 3
            names = ["qid", "iteration", "doc_id", "relevance"] if width == 4 else ["qid", "doc_id", "relevance"]
            dtypes = {"qid": str, "iteration": str, "doc_id": str, "relevance": np.int64}
            try:
                raw = _read_csv(p, names, dtypes, skip=first[0] if header else 0)
                rel = raw["relevance"].to_numpy()
                ok = width in (3, 4) and bool(((rel >= -2**31) & (rel < 2**31)).all())
            except (ValueError, OverflowError, pd.errors.ParserError, *BROKEN):
                ok = False
            ok = ok and (width == 4 or not subtopics)
            frame = _scan_qrels(p, subtopics) if not ok else _categorical_ids(pd.DataFrame(
                {"qid": raw["qid"], "doc_id": raw["doc_id"], "relevance": rel.astype(np.int64),
                 **({"subtopic": raw["iteration"].astype("category")} if subtopics else {})}))
    keys = ["qid", "subtopic", "doc_id"] if subtopics else ["qid", "doc_id"]
    dup = frame.duplicated(keys)
    if dup.any():
        row = frame[dup].iloc[0]
        also = f", subtopic {row.subtopic!r}" if subtopics else ""
        raise FrameValidationError(f"{p}: duplicate judgement for query {row.qid!r}, document {row.doc_id!r}{also}")
    return frame


def write_qrels(qrels: Any, path: str | Path) -> None:
    """Write ``qid, doc_id, relevance`` as TREC qrels (or parquet by extension), all or nothing."""
    df = as_qrels(qrels)
    p = Path(path)
    if _is_parquet(p):
        with replacing(p) as tmp:
            to_parquet(df, tmp)
        return
    rel = relevance_column(df)
    qids, docs = _text_ids(df, "qrels")
    with replacing(p) as tmp, _open(tmp, "w") as fh:
        for q, d, r in zip(qids, docs, rel.tolist(), strict=True):
            fh.write(f"{q} 0 {d} {r}\n")
