"""The BEIR layout: ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]``, ``qrels/<split>.tsv``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kolm_search._params import path_exists
from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.io._text import text_lines
from kolm_search.io.trec import read_qrels

__all__ = ["Dataset", "SELF_HITS_ATTR", "load_beir", "load_beir_qrels", "report_unknown_queries"]

SELF_HITS_ATTR = "drop_self_hits"
"""Key in a qrels frame's ``attrs`` saying documents whose id is the query's are dropped from
runs before scoring (BEIR's ``ignore_identical_ids``); see :attr:`Dataset.drop_self_hits`."""


@dataclass
class Dataset:
    """A test collection.

    Attributes
    ----------
    corpus : DataFrame ``id, title, content`` (+ metadata columns)
    queries : DataFrame ``qid, query``
    qrels : DataFrame ``qid, doc_id, relevance`` (int)
    name : str
    drop_self_hits : bool
        Whether evaluation drops, from a run, the documents whose id equals the query id before
        scoring, as BEIR's evaluation does (``EvaluateRetrieval.evaluate`` with its default
        ``ignore_identical_ids=True``). On for BEIR's datasets (loaded by name, from a folder
        named like one, or as ``irds:beir/...``), where it matters for ArguAna and Quora, whose
        queries are documents of the corpus; off otherwise. Stored in ``qrels.attrs``, so it
        travels with the qrels frame: ``evaluate(run, ds.qrels)`` applies it too.
    """

    corpus: pd.DataFrame
    queries: pd.DataFrame
    qrels: pd.DataFrame
    name: str = ""

    @property
    def drop_self_hits(self) -> bool:
        return bool(self.qrels.attrs.get(SELF_HITS_ATTR, False))

    @drop_self_hits.setter
    def drop_self_hits(self, value: bool) -> None:
        self.qrels.attrs[SELF_HITS_ATTR] = bool(value)

    def judged_queries(self) -> pd.DataFrame:
        """The queries that have at least one judgement (what BEIR evaluates)."""
        keep = _judged(self.queries["qid"], self.qrels["qid"])
        return self.queries[keep].reset_index(drop=True)

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}: {len(self.corpus)} documents, {len(self.queries)} queries, "
                f"{len(self.qrels)} judgements{', self-hits dropped' if self.drop_self_hits else ''})")


def _judged(qids: pd.Series, judged: pd.Series) -> np.ndarray:
    """A bool mask of ``qids`` found in ``judged``: one Arrow ``is_in`` when both columns are
    Arrow arrays of one type (strings or integers, no nulls; categoricals by their values), else a set lookup per query
    (pandas' ``isin`` of arrow strings boxes every value)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        left, right = pa.array(qids, from_pandas=True), pa.array(judged, from_pandas=True)
        left, right = (a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in (left, right))
    except (pa.ArrowException, TypeError, ValueError):
        left = right = None
    if left is not None and right is not None and left.type == right.type and not left.null_count \
            and (pa.types.is_string(left.type) or pa.types.is_large_string(left.type) or pa.types.is_integer(left.type)):
        return pc.is_in(left, value_set=right.unique()).to_numpy(zero_copy_only=False)
    found = set(judged)
    return np.fromiter((qid in found for qid in qids), bool, count=len(qids))


def _find(root: Path, stem: str) -> Path:
    parquet = root / f"{stem.removesuffix('.jsonl')}.parquet"
    for candidate in (root / stem, root / f"{stem}.gz", parquet):
        if candidate.exists():
            return candidate
    raise KolmValueError(f"{str(root)!r} is not a BEIR folder: {stem}[.gz] (or {parquet.name}) is missing")


def _cell_ok(value: Any, column: str, nullable: bool) -> bool:
    if column == "_id":
        return (isinstance(value, str) and value != "") or (
            isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)))
    return isinstance(value, str) or (nullable and value is None)


def _parquet(path: Path, text_columns: tuple[str, ...], optional: tuple[str, ...]) -> pd.DataFrame:
    """``_id`` (strings or integers, as str) and ``text_columns`` (strings) of a parquet file,
    plus ``optional`` string columns (missing values allowed) when present; every problem is a
    FrameValidationError naming the file, the column and the row."""
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many kinds for a file that is not parquet
        raise FrameValidationError(f"{path}: cannot read it as parquet ({type(exc).__name__}: {exc})") from exc
    missing = [c for c in ("_id", *text_columns) if c not in frame.columns]
    if missing:
        raise FrameValidationError(f"{path}: lacks column(s) {missing}; has {list(frame.columns)}")
    out = {}
    for column in ("_id", *text_columns, *(c for c in optional if c in frame.columns)):
        values = frame[column].astype(object).tolist()
        if column in optional:  # a missing title (None, NaN, NA) is None
            values = [None if not isinstance(v, str) and pd.api.types.is_scalar(v) and pd.isna(v) else v
                      for v in values]
        bad = next((i for i, v in enumerate(values) if not _cell_ok(v, column, column in optional)), None)
        if bad is not None:
            raise FrameValidationError(f"{path}: column {column!r} row {bad} holds {values[bad]!r}; expected "
                                       + ("a non-empty string or an integer" if column == "_id" else "a string"))
        out[column] = [str(v) for v in values] if column == "_id" else values
    return pd.DataFrame(out)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _text_and_title(path: Path, lineno: int, obj: dict[str, Any]) -> tuple[str, str | None]:
    """A corpus record's ``text`` and ``title`` (None when absent), checked to be strings."""
    text, title = obj.get("text"), obj.get("title")
    if not isinstance(text, str):
        raise FrameValidationError(f"{path}:{lineno}: document {obj['_id']!r} has no string 'text'")
    if title is not None and not isinstance(title, str):
        raise FrameValidationError(f"{path}:{lineno}: document {obj['_id']!r} has a 'title' that is not a string")
    return text, title


def _jsonl(path: Path, fields: tuple[str, ...], **span: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line (of a part of the file: ``span`` as
    :func:`~kolm_search.io._text.text_lines` takes it); ``_id`` checked, and ``fields`` that
    hold strings checked to be Unicode text (JSON's ``\\ud800`` escapes can write a lone
    surrogate, which no UTF-8 consumer can take)."""
    yield from jsonl_records(path, text_lines(path, **span), fields)


def jsonl_records(path: Path, lines: Iterable[tuple[int, str]], fields: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """What :func:`_jsonl` yields of ``(line number, line)`` pairs read elsewhere (blank lines
    skipped, each record checked, errors naming ``path`` and the line)."""
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FrameValidationError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        except (ValueError, RecursionError) as exc:  # a number past the int digits limit, nesting too deep
            raise FrameValidationError(f"{path}:{lineno}: invalid JSON ({type(exc).__name__}: {exc})") from exc
        if not isinstance(obj, dict) or "_id" not in obj:
            raise FrameValidationError(f"{path}:{lineno}: expected an object with '_id'")
        if not isinstance(obj["_id"], (str, int)) or isinstance(obj["_id"], bool) or obj["_id"] == "":
            raise FrameValidationError(f"{path}:{lineno}: '_id' must be a non-empty string or integer, got {obj['_id']!r}")
        if _SURROGATE_ESCAPE.search(line):
            for name in ("_id", *fields):
                value = obj.get(name)
                if not isinstance(value, str):
                    continue
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise FrameValidationError(f"{path}:{lineno}: {name!r} holds a lone surrogate "
                                               f"({value[exc.start]!a}), not Unicode text") from exc
        yield lineno, obj


def _read_corpus(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        table = _parquet(path, ("text",), ("title",))
        corpus = pd.DataFrame({"id": table["_id"], "title": table["title"].map(lambda t: t or None)
                               if "title" in table.columns else None, "content": table["text"]})
        return _unique(corpus, "id", path, "document")
    ids, titles, texts, extra = [], [], [], []
    for lineno, obj in _jsonl(path, ("text", "title")):
        text, title = _text_and_title(path, lineno, obj)
        ids.append(str(obj["_id"]))
        titles.append(title or None)
        texts.append(text)
        meta = obj.get("metadata")
        extra.append(meta if isinstance(meta, dict) and meta else None)
    corpus = pd.DataFrame({"id": ids, "title": titles, "content": texts})
    if any(m is not None for m in extra):
        corpus["metadata"] = extra
    return _unique(corpus, "id", path, "document")


def _unique(frame: pd.DataFrame, column: str, path: Path, what: str) -> pd.DataFrame:
    dup = frame[column].duplicated()
    if dup.any():
        raise FrameValidationError(f"{path}: duplicate {what} id {frame[column][dup].iloc[0]!r}")
    return frame


def _read_queries(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        table = _parquet(path, ("text",), ())
        return _unique(pd.DataFrame({"qid": table["_id"], "query": table["text"]}), "qid", path, "query")
    rows = []
    for lineno, obj in _jsonl(path, ("text",)):
        if not isinstance(obj.get("text"), str):
            raise FrameValidationError(f"{path}:{lineno}: query {obj['_id']!r} has no string 'text'")
        rows.append((str(obj["_id"]), obj["text"]))
    return _unique(pd.DataFrame(rows, columns=["qid", "query"]), "qid", path, "query")


def load_beir(path: str | Path, split: str = "test") -> Dataset:
    """Read a BEIR folder into a :class:`Dataset` (``drop_self_hits`` on when the folder is
    named like a BEIR dataset of the download registry, e.g. ``arguana``).

    ``corpus.parquet``, ``queries.parquet`` (columns ``_id``, ``text``, and ``title`` for the
    corpus; Hugging Face's BEIR layout) and ``qrels/<split>.parquet`` are read in place of the
    text files when those are absent. Raises ``KolmValueError``/``FrameValidationError`` naming
    the file (and the line, or the column and row) for a missing file, malformed JSON, TSV or
    parquet, duplicate ids, or a non-integer relevance.
    """
    root = _root(path)
    qrels = _read_qrels(root, split)
    queries = _read_queries(_find(root, "queries.jsonl"))
    report_unknown_queries(qrels, queries, f"{root}: qrels/{split}")
    return Dataset(corpus=_read_corpus(_find(root, "corpus.jsonl")), queries=queries, qrels=qrels, name=root.name)


def report_unknown_queries(qrels: pd.DataFrame, queries: pd.DataFrame, where: str) -> int:
    """Warn (``UserWarning``) when qrels judge queries the dataset does not have, with how many
    lines and the first ids: those judgements can never be used (no run answers the query), and
    they are kept as they are. Returns the number of such lines."""
    known = set(queries["qid"].astype(str))
    qids = qrels["qid"].astype(str)
    unknown = ~qids.isin(known)
    count = int(unknown.sum())
    if count:
        import warnings

        first = list(dict.fromkeys(qids[unknown]))
        shown = ", ".join(repr(q) for q in first[:5]) + (", ..." if len(first) > 5 else "")
        warnings.warn(f"{where}: {count} judgement(s) of {len(first)} quer{'y' if len(first) == 1 else 'ies'} that "
                      f"the dataset's queries do not have ({shown}); they are kept, but no run answers them",
                      UserWarning, stacklevel=3)
    return count


def load_beir_qrels(path: str | Path, split: str = "test") -> pd.DataFrame:
    """The qrels of a BEIR folder, as :func:`load_beir` gives them (``attrs`` included), without
    reading its corpus."""
    return _read_qrels(_root(path), split)


def _root(path: str | Path) -> Path:
    return path_exists("BEIR folder", path, kind="dir")


def _read_qrels(root: Path, split: str) -> pd.DataFrame:
    qrels_path = next((p for p in (root / "qrels" / f"{split}{ext}" for ext in (".tsv", ".tsv.gz", ".parquet"))
                       if p.is_file()), None)
    if qrels_path is None:
        found = [p for p in (root / "qrels").glob("*") if p.name.endswith((".tsv", ".tsv.gz", ".parquet"))] \
            if (root / "qrels").is_dir() else []
        available = sorted({p.name.removesuffix(".gz").removesuffix(".tsv").removesuffix(".parquet") for p in found})
        raise KolmValueError(f"{str(root)!r} has no qrels for split {split!r}; available: {available}")
    qrels = read_qrels(qrels_path)
    qrels.attrs[SELF_HITS_ATTR] = _is_beir_name(root.name)
    return qrels


def _is_beir_name(name: str) -> bool:
    """A BEIR dataset (its evaluation drops self-hits): a name of the download registry."""
    from kolm_search.io.download import beir_registry

    return name.lower() in beir_registry()
