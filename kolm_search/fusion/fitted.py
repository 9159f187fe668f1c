"""A fusion method with its trained parameters (:class:`FittedFusion`), and the training data
the supervised methods learn from (:func:`judge`, :func:`train_tables`).

``kolm_search.fit_fusion(runs, qrels, method)`` returns a :class:`FittedFusion`; its
:meth:`~FittedFusion.fuse` applies the method, with the same normalisation and parameters,
to other runs of the same systems (a test split, new queries).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._params import positive_int
from kolm_search.engine import ids
from kolm_search.engine.candidate_frame import CandidateFrame
from kolm_search.engine.runs import as_qrels, relevance_column
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.fusion import probabilistic
from kolm_search.fusion.entries import Entries
from kolm_search.fusion.frames import PreparedRuns, fuse, fuse_frame
from kolm_search.fusion.normalize import apply_norm

__all__ = ["FittedFusion", "Judged", "judge", "train_tables"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class FittedFusion:
    """A fusion method ready to apply: ``method``, ``norm`` and every parameter, trained
    tables included, for the runs named ``runs`` (per-run parameters are in that order).

    Built by ``kolm_search.fit_fusion`` or ``optimize_fusion(...)["fusion"]``; ``params``
    is what :func:`kolm_search.fuse` takes (ranx's names).
    """

    method: str
    norm: str | None
    params: Mapping[str, Any]
    runs: tuple[str, ...]
    score: float | None = field(default=None)

    def in_run_order(self, items: Mapping[Any, Any], what: str = "runs") -> list[Any]:
        """The values of ``items`` (a dict by the fitted runs' names: runs, or the stages that
        made them) in the fitted runs' order; ``KolmValueError`` when the names are others
        (``what`` names the items in it)."""
        names = [str(n) for n in items]
        if sorted(names) != sorted(self.runs):
            raise KolmValueError(f"{what} {names} are not the fitted runs {list(self.runs)}")
        by_name = {str(n): v for n, v in items.items()}
        return [by_name[n] for n in self.runs]

    def _ordered(self, runs: Sequence[Any] | Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        if isinstance(runs, Mapping):
            return dict(zip(self.runs, self.in_run_order(runs), strict=True))
        if isinstance(runs, (str, bytes, pd.DataFrame)):
            raise KolmTypeError("fuse takes a list or a dict of runs, not one run")
        if len(runs) != len(self.runs):
            raise KolmValueError(f"fitted on {len(self.runs)} runs, got {len(runs)}")
        return runs

    def fuse(self, runs: Sequence[Any] | Mapping[str, Any], *, limit: int | None = None,
             n_threads: int | None = None) -> pd.DataFrame:
        """Fuse ``runs`` (a dict by the fitted names, or a list in the fitted order) as
        :func:`kolm_search.fuse` does with this method, normalisation and parameters."""
        return fuse(self._ordered(runs), method=self.method, norm=self.norm, params=self.params, limit=limit,
                    n_threads=n_threads)

    def fuse_frame(self, frame: CandidateFrame, *, limit: int | None = None, n_docs: int | None = None,
                   n_threads: int | None = None) -> CandidateFrame:
        """Fuse a candidate frame whose list ids are the fitted runs' positions."""
        return fuse_frame(frame, method=self.method, norm=self.norm, params=self.params, limit=limit,
                          n_lists=len(self.runs), n_docs=n_docs, n_threads=n_threads)


@dataclass(frozen=True, eq=False)
class Judged:
    """Prepared runs with relevance: ``entries`` (``rel`` set), ``train`` bool (n_queries,)
    the runs' queries that are judged, ``n_train`` the judged queries (those of no run
    included), ``n_relevant`` int64 (n_queries,) relevant documents judged per query."""

    entries: Entries
    train: npt.NDArray[np.bool_]
    n_train: int
    n_relevant: I64


def judge(prepared: PreparedRuns, qrels: Any, *, relevance_level: int = 1,
          queries: Sequence[Any] | None = None) -> Judged:
    """Mark the entries of ``prepared`` judged relevant (grade >= ``relevance_level``) in
    ``qrels``; ids are compared as strings. ``queries`` restricts the judged queries."""
    qrels_df = as_qrels(qrels)
    if queries is not None:
        qrels_df = qrels_df[qrels_df["qid"].astype(str).isin({str(q) for q in queries})]
    grade = relevance_column(qrels_df)
    (run_q, qrels_q), _ = ids.encode([pd.Series(prepared.q_uniques), qrels_df["qid"]],
                                     names=["run qid", "qrels qid"], as_str=True)
    (qrels_d,), judged_docs = ids.encode([qrels_df["doc_id"]], names=["qrels doc_id"], as_str=True)
    n_j = max(len(judged_docs), 1)
    row_doc = np.concatenate([ids.lookup(ids.as_strings(f["doc_id"]), judged_docs) for f in prepared.frames])
    relevant = np.unique(qrels_q[grade >= relevance_level] * n_j + qrels_d[grade >= relevance_level])
    e = prepared.entries
    doc = row_doc[prepared.rows]
    rel = (doc >= 0) & np.isin(run_q[e.query] * n_j + doc, relevant)
    judged_q = np.unique(qrels_q)
    if len(judged_q) == 0:
        raise KolmValueError("qrels judge no query: nothing to train on")
    n_rel = np.bincount(relevant // n_j, minlength=int(max(run_q.max(initial=0), qrels_q.max(initial=0))) + 1)
    return Judged(Entries(e.ptr, e.lists, e.docs, e.score, e.n_lists, e.n_docs, rel), np.isin(run_q, judged_q),
                  len(judged_q), n_rel[run_q].astype(np.int64))


def train_tables(method: str, norm: str | None, judged: Judged, params: Mapping[str, Any]) -> dict[str, Any]:
    """The trained parameters of a supervised ``method`` (canonical name) after ``norm``
    (``params``: ``n_segments`` for probfuse)."""
    if method == "probfuse":
        positive_int("params['n_segments'] of probfuse", params.get("n_segments"))
    e = apply_norm(judged.entries, norm)
    return probabilistic.train(method, e, judged.train, judged.n_train, judged.n_relevant, params)
