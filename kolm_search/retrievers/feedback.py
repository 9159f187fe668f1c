"""``FeedbackRetriever``: BM25 with pseudo-relevance feedback (RM3, Bo1, KL) as weighted queries.

Per batch: one kernel call retrieves the feedback documents of every query, the expansion
weights are computed for all queries at once (:mod:`kolm_search.retrievers.prf_weights`, on
vocabulary ids: expansion terms are never turned back into text), and one kernel call runs
the weighted queries (``sum w * bm25(term, doc)``). Filters apply to both passes.

The weights are computed over the terms in text (code-point) order, and each weighted query
is summed in that order, never in vocabulary-id order: ties between terms go to the term
first in that order, and after ``add``/``delete`` (whose merged vocabulary is numbered unlike
a rebuild's) expansions, float32 scores and tie order equal those over a rebuilt index bit for bit.

The expanded query is visible: :meth:`FeedbackRetriever.expand` /
:meth:`FeedbackRetriever.expanded_queries` return it, and a search writes it to the plan's
metadata, ``response.plan.metadata["feedback"]`` (single search) and
``result.plans[i].metadata["feedback"]`` (``search_batch``)::

    {"model": "rm3", "expanded": [{"term": weight, ...}, ...]}  # one dict per planned query
"""

from __future__ import annotations

import copy
import re
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import scipy.sparse as sp

from kolm_search._params import integer, one_of, probability, real
from kolm_search.compose.kinds import RetrieverStage
from kolm_search.contract.saved_kinds import saved_kind
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.selection import Selections
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers import _validate as check
from kolm_search.retrievers._batching import (
    frame_from_topk,
    fuse_expansions,
    retrieve_single,
    text_selections,
)
from kolm_search.retrievers._persist import Payload, save_index
from kolm_search.retrievers._saved import SavedFiles, Verify, check_manifest, open_index, retrying
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.incremental import SegmentedIndex
from kolm_search.retrievers.postings import Postings
from kolm_search.retrievers.prf_weights import (
    bo1_weights,
    dfr_expand,
    feedback_counts,
    kl_weights,
    rm3_expand,
    rm3_weights,
)
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["FEEDBACK_MODELS", "FeedbackRetriever"]

FEEDBACK_MODELS = ("rm3", "bo1", "kl")
Model = Literal["rm3", "bo1", "kl"]
_DEFAULT_DOCS = {"rm3": 10, "bo1": 3, "kl": 3}  # Anserini fbDocs; Terrier expansion.documents
_ELIGIBLE = re.compile(r"[^\W_]{2,20}")  # Anserini: 2-20 chars of [a-z0-9] (here any letter or digit)
_FORMAT = "kolm-search/feedback"
_VERSION = 1
_CONFIG = ("model", "fb_docs", "fb_terms", "original_weight", "max_df_ratio")


_SHARED: weakref.WeakKeyDictionary[BM25Retriever, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def text_order(vocab: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The vocabulary in code-point order: ``order`` int64 (V,) term ids sorted by their text,
    and its inverse ``rank`` int64 (V,) (``rank[order] == arange(V)``)."""
    order = np.fromiter(sorted(range(len(vocab)), key=vocab.__getitem__), np.int64, len(vocab))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return order, rank


def _term_counts(bm25: BM25Retriever, postings: Postings | None) -> tuple[Any, ...]:
    """``(tf, coll_freq, order, rank)`` of ``bm25``'s index, shared by every feedback retriever
    of that index until it is rebuilt: :func:`text_order` of the vocabulary, the documents'
    term counts int32 CSR (n_docs, V) whose column ``rank[t]`` is term ``t`` (columns in text
    order) and collection frequencies float64 (V,) in that column order."""
    current = (len(bm25.table), len(bm25.vocab))
    hit = _SHARED.get(bm25)
    if hit is not None and hit[0] is bm25.t_ptr and hit[1] == current:
        return hit[2:]
    n_docs, n_terms = current
    order, rank = text_order(bm25.vocab)
    stored = bm25.tf  # the index's own term frequencies (kept for add/delete)
    if postings is None and stored is not None:
        t_ptr = np.asarray(bm25.t_ptr)
        terms = rank[np.repeat(np.arange(n_terms, dtype=np.int64), np.diff(t_ptr))]
        counts = np.asarray(stored, dtype=np.int32)
        tf = sp.csr_matrix((counts, (np.asarray(bm25.t_docs), terms)), shape=(n_docs, n_terms), dtype=np.int32)
        coll_freq = np.bincount(terms, weights=counts, minlength=n_terms).astype(np.float64)
        _SHARED[bm25] = (bm25.t_ptr, current, tf, coll_freq, order, rank)
        return tf, coll_freq, order, rank
    post = postings
    if post is None or post.n_docs != len(bm25.table):  # stale after the index grew: count again
        post = Postings.from_tokens(bm25.tokenizer(t) for t in bm25.table.texts(bm25.fields))
    ids = np.array([bm25._vocab_index.get(t, -1) for t in post.vocab], dtype=np.int64)
    if (ids < 0).any() or not np.array_equal(post.lengths, np.asarray(bm25.doc_len)):
        raise KolmValueError("FeedbackRetriever: the documents counted with the BM25 tokenizer do not match the "
                             "BM25 index (other terms or lengths); pass the index's postings=")
    terms = rank[ids[post.p_term]]
    tf = sp.csr_matrix((post.tf, (post.p_doc, terms)), shape=(n_docs, n_terms), dtype=np.int32)
    coll_freq = np.bincount(terms, weights=post.tf, minlength=n_terms).astype(np.float64)
    _SHARED[bm25] = (bm25.t_ptr, current, tf, coll_freq, order, rank)
    return tf, coll_freq, order, rank


@saved_kind("feedback")
class FeedbackRetriever(RetrieverStage):
    """BM25 with pseudo-relevance feedback: RM3 (Anserini), Bo1 or KL (Terrier).

    Parameters
    ----------
    bm25 : BM25Retriever
        First- and second-pass retriever (its tokenizer, fields and BM25 variant).
    model : {"rm3", "bo1", "kl"}, default "rm3"
    fb_docs : int, optional
        Feedback documents per query (default 10 for RM3, 3 for Bo1/KL).
    fb_terms : int, default 10
        Expansion terms kept.
    original_weight : float, default 0.5
        RM3 only: weight of the original query in the interpolation.
    max_df_ratio : float, default 0.1
        RM3 only: terms in more than this share of the documents are never feedback terms.
    postings : Postings, optional
        Counted postings of the table's rows. By default the index's own term frequencies are
        used (``bm25.tf``); an index without them (a shard weighted with external statistics)
        has its table re-tokenised with its tokenizer once, on first use.

    Notes
    -----
    Formulas: :mod:`kolm_search.retrievers.prf_weights`. Collection statistics are those of
    this index (a shard uses its own). The term counts are shared by the feedback retrievers
    of one index and rebuilt when the index changes (a rebuild, or a merge of ``add``/``delete``).
    """

    name = "feedback"

    def __init__(self, bm25: BM25Retriever, model: Model = "rm3", *, fb_docs: int | None = None,
                 fb_terms: int = 10, original_weight: float | None = None, max_df_ratio: float | None = None,
                 postings: Postings | None = None) -> None:
        if not isinstance(bm25, BM25Retriever):
            raise KolmTypeError(f"bm25 must be a BM25Retriever, got {type(bm25).__name__}")
        one_of("model", model, FEEDBACK_MODELS)
        for name, value in (("original_weight", original_weight), ("max_df_ratio", max_df_ratio)):
            if value is not None and model != "rm3":
                raise KolmValueError(f"{name} applies to model 'rm3' only, got {name}={value!r} with model {model!r}")
        self.bm25 = bm25
        self.model: Model = model
        self.fb_docs: int = integer("fb_docs", _DEFAULT_DOCS[model] if fb_docs is None else fb_docs, low=1)
        self.fb_terms: int = integer("fb_terms", fb_terms, low=1)
        self.original_weight = probability("original_weight", 0.5 if original_weight is None else original_weight)
        self.max_df_ratio: float = real("max_df_ratio", 0.1 if max_df_ratio is None else max_df_ratio, low=0, high=1,
                                        closed="right")
        self._postings = postings
        self._postings_revision = bm25.revision  # postings= describe the index as it is now
        self._cache: tuple[Any, ...] | None = None

    @property
    def table(self) -> Any:
        """The BM25 index's document table (read by the pipeline's columnar path)."""
        return self.bm25.table

    # -- incremental updates: changes go to the BM25 index ---------------------------------
    @property
    def revision(self) -> str:
        """The BM25 index's revision (:class:`~kolm_search.contract.ports.Updatable`)."""
        return self.bm25.revision

    def add(self, documents: Any, embeddings: Any = None, *, defer: bool = False) -> None:
        """Add documents to the BM25 index (:meth:`BM25Retriever.add`); the feedback then equals
        feedback over the rebuilt index."""
        self.bm25.add(documents, embeddings, defer=defer)

    def delete(self, ids: Sequence[str], *, defer: bool = False) -> None:
        """Delete documents from the BM25 index (:meth:`BM25Retriever.delete`)."""
        self.bm25.delete(ids, defer=defer)

    def merge(self) -> None:
        """Merge the BM25 index's deferred changes."""
        self.bm25.merge()

    def indexes(self) -> list[SegmentedIndex]:
        """The index a change applies to: the BM25 index (:class:`~kolm_search.contract.ports.HoldsIndexes`)."""
        return [self.bm25]

    # -- stage parameters (kolm_search.compose) ---------------------------------------------
    def stage_params(self) -> dict[str, Any]:
        """``bm25, model, fb_docs, fb_terms, original_weight, max_df_ratio`` (``bm25__k1`` reaches the index)."""
        return {"bm25": self.bm25, "model": self.model, "fb_docs": self.fb_docs, "fb_terms": self.fb_terms,
                "original_weight": self.original_weight, "max_df_ratio": self.max_df_ratio}

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Set feedback parameters (checked as the constructor checks them; on error nothing changes)."""
        if not changes:
            return
        merged = {**self.stage_params(), **changes}
        rm3 = {"original_weight": merged["original_weight"], "max_df_ratio": merged["max_df_ratio"]} \
            if merged["model"] == "rm3" else {}
        fb_docs = merged["fb_docs"] if "fb_docs" in changes or "model" not in changes else None
        rebuilt = FeedbackRetriever(merged["bm25"], merged["model"], fb_docs=fb_docs, fb_terms=merged["fb_terms"],
                                    postings=self._postings if merged["bm25"] is self.bm25 else None, **rm3)
        self.__dict__.update(rebuilt.__dict__)

    def __copy__(self) -> FeedbackRetriever:
        """The same feedback over a copy of the BM25 index (``SearchClient.add`` changes a copy)."""
        rm3 = {"original_weight": self.original_weight, "max_df_ratio": self.max_df_ratio} if self.model == "rm3" else {}
        out = FeedbackRetriever(copy.copy(self.bm25), self.model, fb_docs=self.fb_docs, fb_terms=self.fb_terms,
                                postings=self._postings, **rm3)
        out._postings_revision = self._postings_revision
        return out

    # -- collection term counts (built once per index) ------------------------------------
    def _counts(self) -> tuple[Any, ...]:
        """``(tf, coll_freq, eligible, order)``, columns in the terms' text order (see
        :func:`_term_counts`): document term counts int32 CSR (n_docs, V), collection
        frequencies float64 (V,), RM3-eligible terms bool (V,), and ``order`` int64 (V,) the
        term id of each column."""
        bm25 = self.bm25
        current = (len(bm25.table), len(bm25.vocab))
        if self._cache is not None and self._cache[0] is bm25.t_ptr and self._cache[1] == current:
            return self._cache[2:]
        postings = self._postings if bm25.revision == self._postings_revision else None  # stale after add/delete
        tf, coll_freq, order, _ = _term_counts(bm25, postings)
        df = np.diff(np.asarray(bm25.t_ptr))
        eligible = np.array([_ELIGIBLE.fullmatch(t) is not None for t in bm25.vocab], dtype=bool)
        eligible &= df.astype(np.float64) <= self.max_df_ratio * len(bm25.table)
        self._cache = (bm25.t_ptr, current, tf, coll_freq, eligible[order], order)
        return self._cache[2:]

    # -- expansion ---------------------------------------------------------------------
    def _expand(self, texts: Sequence[str], selections: Selections | None = None,
                ) -> tuple[sp.csr_matrix, npt.NDArray[np.int64]]:
        """Expanded weighted queries, float64 CSR (len(texts), V) over the terms in text order
        (column ``j`` is term id ``order[j]``), and ``order``.

        Every step works on that column order, so ties in a top-k go to the term first in
        code-point order and every sum runs in text order: the result depends on the indexed
        documents only, never on the vocabulary's numbering (a merged ``add``/``delete``
        numbers terms unlike a rebuild, and its feedback still equals the rebuild's bit for bit).
        """
        bm25 = self.bm25
        bm25.merge()
        tf, coll_freq, eligible, order = self._counts()
        m, n_terms = len(texts), len(bm25.vocab)
        q_ptr, q_ids = bm25.encode(texts)
        rank = np.empty(n_terms, np.int64)
        rank[order] = np.arange(n_terms, dtype=np.int64)
        query_tf = sp.csr_matrix((np.ones(len(q_ids)), rank[q_ids], q_ptr), shape=(m, n_terms))
        if len(bm25.table) == 0 or m == 0:
            return sp.csr_matrix((m, n_terms)), order
        docs, scores, counts = bm25.score_encoded(q_ptr, q_ids, self.fb_docs, selections)
        keep = np.arange(docs.shape[1])[None, :] < counts[:, None]
        fb_docs, owner = docs[keep], np.nonzero(keep)[0]
        fb_tf = tf[fb_docs]
        if self.model == "rm3":
            rm = rm3_weights(fb_tf, owner, scores[keep], m, fb_terms=self.fb_terms, eligible=eligible)
            return rm3_expand(query_tf, rm, self.original_weight), order
        tfx, df, n_fb = feedback_counts(fb_tf, owner, m)
        fb_len = np.bincount(owner, weights=np.asarray(bm25.doc_len, dtype=np.float64)[fb_docs], minlength=m)
        n_docs, coll_len = len(bm25.table), int(np.asarray(bm25.doc_len).sum())
        if self.model == "bo1":
            weights = bo1_weights(tfx, coll_freq, n_docs)
        else:
            weights = kl_weights(tfx, fb_len, coll_freq, coll_len)
        return dfr_expand(query_tf, weights, tfx, df, n_fb, model=self.model, fb_terms=self.fb_terms,
                          n_docs=n_docs, coll_len=coll_len, fb_len=fb_len), order

    def _as_dicts(self, expanded: sp.csr_matrix, order: npt.NDArray[np.int64]) -> list[dict[str, float]]:
        """Each row of :meth:`_expand`'s matrix as term -> weight, heaviest first (ties in text order)."""
        vocab, out = self.bm25.vocab, []
        for i in range(expanded.shape[0]):
            lo, hi = expanded.indptr[i], expanded.indptr[i + 1]
            cols, w = expanded.indices[lo:hi], expanded.data[lo:hi]
            out.append({vocab[int(order[cols[j]])]: float(w[j]) for j in np.lexsort((cols, -w))})
        return out

    def expand(self, texts: Sequence[str]) -> list[dict[str, float]]:
        """The expanded query of each text: analysed term -> weight, heaviest first."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise KolmTypeError("texts must be a sequence of str")
        return self._as_dicts(*self._expand(list(texts)))

    def expanded_queries(self, queries: Sequence[str] | pd.DataFrame) -> pd.DataFrame:
        """The expanded queries as a DataFrame ``qid, term, weight`` (heaviest first per query);
        ``queries`` a list of str (qid = position) or a DataFrame with ``qid`` and ``query``."""
        if isinstance(queries, pd.DataFrame):
            missing = [c for c in ("qid", "query") if c not in queries.columns]
            if missing:
                raise KolmValueError(f"queries DataFrame lacks column(s) {missing}; has {list(queries.columns)}")
            qids, texts = list(queries["qid"]), list(queries["query"])
        else:
            qids, texts = list(range(len(queries))), list(queries)
        rows = [(qid, term, w) for qid, d in zip(qids, self.expand(texts), strict=True) for term, w in d.items()]
        return pd.DataFrame(rows, columns=["qid", "term", "weight"])

    # -- retrieval ---------------------------------------------------------------------
    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        """Candidates of every query of ``batch`` from its expanded weighted queries (several
        planned queries of one batch query fused by RRF, as :class:`BM25Retriever` does)."""
        bm25 = self.bm25
        bm25.merge()
        selections = text_selections(batch, bm25.table)
        if batch.mode == "vector" or len(bm25.table) == 0:
            return CandidateFrame.empty(batch.n_queries)
        expanded, order = self._expand(batch.texts, selections)
        # each query's terms in text order (the CSR's column order): the kernel sums in that order
        docs, scores, counts = bm25.score_weighted(expanded.indptr, order[expanded.indices], expanded.data,
                                                   batch.limit, selections)
        if batch.metadata is not None:
            per_text = self._as_dicts(expanded, order)
            bounds = np.searchsorted(batch.owner, np.arange(batch.n_queries + 1))  # owner is non-decreasing
            for q, md in enumerate(batch.metadata):
                if isinstance(md, dict):
                    md["feedback"] = {"model": self.model, "expanded": per_text[bounds[q]:bounds[q + 1]]}
        return fuse_expansions(frame_from_topk(docs, scores, counts), batch, k=bm25.fusion_k, n_docs=len(bm25.table))

    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: candidates for one query, best first."""
        self.bm25.merge()
        return retrieve_single(self, context)

    # -- persistence -------------------------------------------------------------------
    def _payload(self) -> Payload:
        """What :meth:`save` writes: the feedback parameters and the BM25 index (a child)."""
        config = {"model": self.model, "fb_docs": self.fb_docs, "fb_terms": self.fb_terms,
                  "original_weight": self.original_weight, "max_df_ratio": self.max_df_ratio}
        return Payload(_FORMAT, _VERSION, {"config": config}, children=[self.bm25._payload()])

    def save(self, path: str | Path) -> None:
        """Write the feedback parameters and the BM25 index (with its term frequencies) to
        folder ``path``, all or nothing (:meth:`BM25Retriever.save`). ``postings=`` is not
        saved: a loaded shard re-tokenises its table on first use."""
        save_index(path, self._payload())

    @classmethod
    def load(cls, path: str | Path, *, mmap: bool = True, n_threads: int | None = None,
             verify: Verify = "auto") -> FeedbackRetriever:
        """Load a retriever written by :meth:`save`, its BM25 index checked as
        :meth:`BM25Retriever.load` checks one."""
        root = Path(path)

        def read() -> FeedbackRetriever:
            body, files = open_index(root, files_since=1, verify=verify)
            return cls._from_saved(files, body, mmap=mmap, n_threads=n_threads)

        return retrying(root, read)

    @classmethod
    def _from_saved(cls, files: SavedFiles, body: Any, *, mmap: bool = True,
                    n_threads: int | None = None) -> FeedbackRetriever:
        where = files.where
        body = check_manifest(where, body, _FORMAT, _VERSION, ("children", *files.manifest_keys))
        files.expect(())
        cfg = check.check_keys(where, "config", body["config"], _CONFIG)
        if not isinstance(cfg["model"], str) or cfg["model"] not in FEEDBACK_MODELS:
            raise KolmValueError(f"{where}: key 'config.model' must be one of {list(FEEDBACK_MODELS)}, "
                                 f"got {cfg['model']!r}")
        fb_docs = check.integer(where, "config.fb_docs", cfg["fb_docs"], 1)
        fb_terms = check.integer(where, "config.fb_terms", cfg["fb_terms"], 1)
        ow = check.number(where, "config.original_weight", cfg["original_weight"], 0.0, 1.0)
        ratio = check.number(where, "config.max_df_ratio", cfg["max_df_ratio"], 0.0, 1.0)
        if ratio == 0:
            raise KolmValueError(f"{where}: key 'config.max_df_ratio' must lie in (0, 1], got 0")
        ((child, child_files),) = files.children(body, 1)
        bm25 = BM25Retriever._from_saved(child_files, child, mmap=mmap, n_threads=n_threads)
        model = cast(Model, cfg["model"])  # one of FEEDBACK_MODELS, checked above
        if model != "rm3":
            return cls(bm25, model, fb_docs=fb_docs, fb_terms=fb_terms)
        return cls(bm25, model, fb_docs=fb_docs, fb_terms=fb_terms, original_weight=ow, max_df_ratio=ratio)

    def __repr__(self) -> str:
        extra = f", original_weight={self.original_weight:g}" if self.model == "rm3" else ""
        return (f"FeedbackRetriever({self.model}, fb_docs={self.fb_docs}, fb_terms={self.fb_terms}{extra}, "
                f"{self.bm25!r})")
