"""A retriever's own score of exactly the candidates it is given, as a learning-to-rank feature
(on the right of ``**``): ``(hybrid % 100) ** BM25Score(bm25) ** DenseScore(dense)``.

A retrieving stage on the right of ``**`` contributes its score of the candidates that are
among *its own* top ``FIT_DEPTH`` (1000) documents and 0 for the others. (When ``**`` still
grouped to the right, ``a ** b ** c`` with retrieving ``b`` and ``c`` gave ``c``'s score only
where ``b`` retrieved the candidate too: in ``(hybrid % 100) ** bm25 ** bo1 ** dense ** ...``
the MiniLM cosine was 0 for 4% (cranfield), 15% (med, npl) and 27% (lisa) of the hybrid's
top-100 candidates; the union is flat now.) These stages re-rank instead (``is_source``
False): each scores every candidate it is given, in one call per batch, whatever its rank in
the retriever's list.

- :class:`BM25Score`: the candidate's BM25 score under the index ``bm25`` (its parameters,
  fields and tokenizer; any ``BM25Retriever(table, k1=0.9, b=0.4)`` is another feature), the
  score ``bm25`` itself would give the document (its own kernel, limited to the candidates),
  0 for a document holding no query term;
- :class:`DenseScore`: the similarity (cosine, or inner product for ``metric="ip"``) of the
  query's embedding and the candidate's under the dense index ``dense`` (the MiniLM index, an
  LSA one, one over the titles ...).

Both read the query's primary text (its first, as the other feature stages do).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.compose.runner import stage_name
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.selection import Selection, Selections
from kolm_search.errors import KolmTypeError, SearchError
from kolm_search.retrievers._ltr_stage import CandidateFeature, primary_texts, same_table
from kolm_search.retrievers._vectors import embed_texts, normalise_rows
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever

__all__ = ["BM25Score", "DenseScore"]

_ROWS_PER_DOT = 1 << 16  # candidates whose embeddings are gathered at once


class BM25Score(CandidateFeature):
    """Each candidate's BM25 score under ``bm25`` (see the module doc).

    Parameters
    ----------
    bm25 : BM25Retriever
        The index (over the candidates' documents) and its scoring parameters.
    """

    params = ("bm25",)
    bm25: BM25Retriever

    def __init__(self, bm25: BM25Retriever) -> None:
        self._init(bm25=bm25)

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(values["bm25"], BM25Retriever):
            raise KolmTypeError(f"BM25Score.bm25 must be a BM25Retriever, got {type(values['bm25']).__name__}")
        return values

    def feature(self, batch: QueryBatch, candidates: CandidateFrame) -> npt.NDArray[np.float64]:
        bm = self.bm25
        bm.merge()
        same_table(self, batch, bm.table)
        n_docs = len(bm.table)
        out = np.zeros(len(candidates), np.float64)
        if not len(candidates) or not n_docs:
            return out
        ptr = candidates.ptr
        chosen = [Selection.of_rows(np.unique(candidates.doc[ptr[q]:ptr[q + 1]]), n_docs)
                  for q in range(candidates.n_queries)]
        sel = Selections.build(np.arange(candidates.n_queries), chosen)
        k = int(np.diff(ptr).max())
        docs, scores, counts = bm.score_texts(primary_texts(batch), k, sel)
        keep = np.arange(docs.shape[1])[None, :] < counts[:, None]
        found = (np.repeat(np.arange(candidates.n_queries, dtype=np.int64), counts) * n_docs + docs[keep])
        order = np.argsort(found, kind="stable")
        found, values = found[order], scores[keep][order].astype(np.float64)
        want = candidates.query.astype(np.int64) * n_docs + candidates.doc
        at = np.minimum(np.searchsorted(found, want), max(len(found) - 1, 0))
        hit = (found[at] == want) if len(found) else np.zeros(len(want), bool)
        out[hit] = values[at[hit]]
        return out


class DenseScore(CandidateFeature):
    """Each candidate's similarity to the query under ``dense`` (see the module doc).

    The query is embedded by ``dense``'s embedder when it has ``embed_queries=True`` or the
    pipeline passes no query embeddings, as :meth:`DenseRetriever.retrieve_batch` does.

    Parameters
    ----------
    dense : DenseRetriever
        The index (over the candidates' documents), its embeddings and metric.
    """

    params = ("dense",)
    dense: DenseRetriever

    def __init__(self, dense: DenseRetriever) -> None:
        self._init(dense=dense)

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(values["dense"], DenseRetriever):
            raise KolmTypeError(f"DenseScore.dense must be a DenseRetriever, got {type(values['dense']).__name__}")
        return values

    def _queries(self, batch: QueryBatch) -> npt.NDArray[np.float32]:
        """One embedding per batch query (its primary text's), float32 (n_queries, d)."""
        dense = self.dense
        if dense.embed_queries or batch.embeddings is None:
            if dense.embedder is None:
                raise SearchError(stage_name(self), "the dense index has no embedder and the batch no query embeddings")
            vectors = embed_texts(dense.embedder, primary_texts(batch))
        else:
            first = np.searchsorted(batch.owner, np.arange(batch.n_queries), side="left")
            vectors = np.asarray(batch.embeddings, dtype=np.float32)[np.minimum(first, len(batch.texts) - 1)]
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim != 2 or q.shape != (batch.n_queries, dense.dim):
            raise SearchError(stage_name(self), f"query embeddings have shape {q.shape}; the index has dimension "
                                                f"{dense.dim}")
        return normalise_rows(q) if dense.metric == "cosine" else q

    def feature(self, batch: QueryBatch, candidates: CandidateFrame) -> npt.NDArray[np.float64]:
        dense = self.dense
        dense.merge()
        same_table(self, batch, dense.table)
        out = np.zeros(len(candidates), np.float64)
        if not len(candidates):
            return out
        q = self._queries(batch)
        emb = dense.embeddings
        for s in range(0, len(candidates), _ROWS_PER_DOT):
            rows = slice(s, s + _ROWS_PER_DOT)
            out[rows] = np.einsum("ij,ij->i", emb[candidates.doc[rows]], q[candidates.query[rows]])
        return out
