"""Diversity measures over subtopic qrels: ``alpha_nDCG@k``, ``alpha_DCG@k``, ``ERR_IA@k`` and
``nERR_IA@k`` (ir_measures' names, ndeval's definitions; :mod:`kolm_search._kernels.diversity`).

Subtopic qrels are qrels with a ``subtopic`` column (or ``iteration``, as ir_measures and
trec_eval's diversity files name it; :func:`~kolm_search.io.read_qrels` with ``subtopics=True``
keeps it): a document may be judged once per subtopic. A judgement counts as relevant when its
grade reaches the measure's ``rel`` (default: the call's relevance level), binary as in ndeval;
``alpha`` (default 0.5) is the redundancy intolerance. The run is ranked the trec_eval way, as for
every measure here (ndeval, through pyndeval, breaks score ties by document id ascending: the
values agree on tie-free runs). Other measures asked in the same call see each document once,
with its highest grade over the subtopics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._kernels.measure_ids import DIVERSITY_IDS
from kolm_search.engine import ids
from kolm_search.engine.runs import relevance_column
from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.evaluation.measures import MeasureSpec

__all__ = ["SUBTOPIC_COLUMNS", "collapse_subtopics", "diversity_values", "subtopic_column"]

SUBTOPIC_COLUMNS = ("subtopic", "iteration")


def subtopic_column(qrels: pd.DataFrame, specs: list[MeasureSpec]) -> str:
    """The qrels' subtopic column; raises naming the measures when there is none."""
    for column in SUBTOPIC_COLUMNS:
        if column in qrels.columns:
            return column
    names = ", ".join(s.key for s in specs)
    raise KolmValueError(f"{names} need subtopic qrels: a 'subtopic' (or 'iteration') column, one judgement per "
                         f"query, subtopic and document (read_qrels(path, subtopics=True) keeps it); the qrels have "
                         f"{list(qrels.columns)}")


def collapse_subtopics(qrels: pd.DataFrame, column: str) -> pd.DataFrame:
    """One judgement per (query, document): its highest grade over the subtopics; a (query,
    subtopic, document) judged twice is refused."""
    dup = qrels.duplicated(["qid", column, "doc_id"])
    if dup.any():
        row = qrels[dup].iloc[0]
        raise FrameValidationError(f"subtopic qrels judge document {row.doc_id!r} twice for query {row.qid!r}, "
                                   f"subtopic {row[column]!r}")
    keys = qrels[["qid", "doc_id"]].astype(str)
    frame = pd.DataFrame({"qid": keys["qid"], "doc_id": keys["doc_id"], "relevance": relevance_column(qrels)})
    out = frame.groupby(["qid", "doc_id"], sort=False, as_index=False)["relevance"].max()
    out.attrs.update(qrels.attrs)
    return out


def _layout(qrels: pd.DataFrame, column: str, q_uniques: pd.Index) -> dict[str, Any]:
    """The judged (query, document) pairs sorted by query, their subtopics and grades."""
    q = ids.lookup(qrels["qid"].astype(str), pd.Index(np.asarray(q_uniques, dtype=object), dtype=object))
    (doc,), doc_uniques = ids.encode([qrels["doc_id"]], names=["qrels doc_id"], sort=True, as_str=True)
    (sub,), _ = ids.encode([qrels[column]], names=[f"qrels {column}"], as_str=True)
    width = np.int64(max(len(doc_uniques), 1))
    pair_key = q * width + doc
    keys, pair = np.unique(pair_key, return_inverse=True)  # sorted by query, then document id
    return {"q": q, "pair": pair, "sub": sub, "rel": relevance_column(qrels), "keys": keys, "width": width,
            "pair_q": keys // width, "name_rank": keys % width, "doc_uniques": doc_uniques}


def diversity_values(specs: list[tuple[int, MeasureSpec]], qrels: pd.DataFrame, column: str, q_uniques: pd.Index,
                     run_q: npt.NDArray[np.int64], run_docs: pd.Series, level: int, judged_only: bool,
                     values: npt.NDArray[np.float64], n_threads: int | None) -> None:
    """Fill ``values[:, col]`` of the diversity ``specs`` (col, spec), from the run ranked by
    :func:`~kolm_search.evaluation.metrics.ranking_order` (``run_q``, ``run_docs`` in rank order)."""
    from kolm_search._kernels import load

    kernel = load("diversity")
    n_q = len(q_uniques)
    lay = _layout(qrels, column, q_uniques)
    found = ids.lookup(run_docs, lay["doc_uniques"])
    at = np.searchsorted(lay["keys"], run_q * lay["width"] + np.maximum(found, 0))
    at = np.minimum(at, len(lay["keys"]) - 1) if len(lay["keys"]) else at
    hit = (found >= 0) & (len(lay["keys"]) > 0)
    if len(lay["keys"]):
        hit &= lay["keys"][at] == run_q * lay["width"] + np.maximum(found, 0)
    run_pair = np.where(hit, at, -1).astype(np.int64)
    p_ptr = np.concatenate([[0], np.cumsum(np.bincount(lay["pair_q"], minlength=n_q))]).astype(np.int64)
    groups: dict[tuple[int, bool, float], list[tuple[int, MeasureSpec]]] = {}
    for col, spec in specs:
        groups.setdefault((spec.rel or level, spec.judged_only or judged_only, spec.params[0]), []).append((col, spec))
    for (rel, only, alpha), group in groups.items():
        positive = lay["rel"] >= rel
        pos_pair, pos_sub = lay["pair"][positive], lay["sub"][positive]
        # query-local subtopic numbers, over the subtopics with a relevant document
        base = np.int64(int(lay["sub"].max(initial=0)) + 1)
        query_of = lay["pair_q"][pos_pair]
        uniq, inverse = np.unique(query_of * base + pos_sub, return_inverse=True)
        n_sub = np.bincount(uniq // base, minlength=n_q).astype(np.int64)
        local = inverse - np.searchsorted(uniq, query_of * base)
        order = np.lexsort((local, pos_pair))
        s_ptr = np.concatenate([[0], np.cumsum(np.bincount(pos_pair, minlength=len(lay["keys"])))]).astype(np.int64)
        keep = run_pair >= 0 if only else np.ones(len(run_pair), bool)
        r_ptr = np.concatenate([[0], np.cumsum(np.bincount(run_q[keep], minlength=n_q))]).astype(np.int64)
        got = kernel.diversity_queries(r_ptr, run_pair[keep], p_ptr, s_ptr, local[order], n_sub, lay["name_rank"],
                                       [DIVERSITY_IDS[s.kind] for _, s in group], [s.cutoff for _, s in group],
                                       alpha, n_threads=n_threads)
        for j, (col, _) in enumerate(group):
            values[:, col] = got[:, j]
