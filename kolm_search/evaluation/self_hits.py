"""BEIR's self-hits: a document whose id equals the query id, dropped from runs before scoring.

BEIR's ``EvaluateRetrieval.evaluate(qrels, results, k_values, ignore_identical_ids=True)``
removes, before pytrec_eval scores the run, every document ``pid`` of query ``qid`` with
``qid == pid`` (ids compared as strings), and its retrievers search ``top_k + 1`` and skip
the query's own id. The default is on for every dataset; it changes the scores where the
queries are documents of the corpus: ArguAna (a query argument is in the corpus under its
own id and would rank first) and Quora (the question itself). Pyserini's BEIR regressions do
the same (``--remove-query``); MTEB sets it for ArguAna, Quora and FiQA-2018.

Here the flag rides on the qrels (:attr:`kolm_search.io.Dataset.drop_self_hits`, stored in
``qrels.attrs``): ``evaluate``/``compare``/``Experiment`` take ``drop_self_hits=None`` to
follow it, ``True``/``False`` to force it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import KolmTypeError
from kolm_search.io.beir import SELF_HITS_ATTR

__all__ = ["drop_self_hits", "self_hit_mask", "wants_self_hits_dropped"]


def wants_self_hits_dropped(qrels: pd.DataFrame, drop: bool | None) -> bool:
    """``drop`` when given, else the flag the qrels carry (off when they carry none)."""
    if drop is None:
        return bool(qrels.attrs.get(SELF_HITS_ATTR, False))
    if not isinstance(drop, (bool, np.bool_)):
        raise KolmTypeError(f"drop_self_hits must be True, False or None, got {drop!r}")
    return bool(drop)


def self_hit_mask(run: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Rows of ``run`` (``qid, doc_id``) whose document id equals the query id, as strings;
    bool array of shape ``(len(run),)``."""
    if run.empty:
        return np.zeros(0, dtype=bool)
    qid = run["qid"].astype(str).to_numpy(object)
    doc = run["doc_id"].astype(str).to_numpy(object)
    return np.asarray(qid == doc, dtype=bool)


def drop_self_hits(run: pd.DataFrame, limit: int | None = None) -> tuple[pd.DataFrame, int]:
    """``run`` without its self-hits, and how many were dropped.

    A ``rank`` column is renumbered (zero-based, in its former order); with ``limit``, each
    query keeps its ``limit`` best remaining documents (by ``rank`` if there, else highest
    score first, ties in row order), as BEIR's search of ``top_k + 1`` without the query's own
    id does. The run is returned as is when it has no self-hit and no ``limit``.
    """
    mask = self_hit_mask(run)
    n = int(mask.sum())
    if limit is None and n == 0:
        return run, 0
    out = run[~mask].reset_index(drop=True)
    key = "rank" if "rank" in out.columns else "score"
    order = out.sort_values(["qid", key], ascending=[True, key == "rank"], kind="stable")
    position = order.groupby("qid", sort=False, observed=True).cumcount().sort_index().to_numpy(np.int64)
    if "rank" in out.columns:
        out["rank"] = position
    if limit is not None:
        out = out[position < limit].reset_index(drop=True)
    return out, n
