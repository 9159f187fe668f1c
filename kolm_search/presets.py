"""Ready-made clients: ``bm25()``, ``dense()``, ``hybrid()`` and ``hybrid_plus()``.

Each takes the corpus (``SearchDocument``s, a DataFrame with ``id`` and ``content``, or a
:class:`DocumentTable`) or an index built or loaded before (``bm25(BM25Retriever.load(path))``:
used as it is, nothing rebuilt; another kind of index gives its documents) and returns a
:class:`SearchClient` whose retriever has the columnar batch path. Every built pipeline is plain arrays plus configuration, so it pickles and
travels to worker processes.
"""

from __future__ import annotations

from typing import Any

from kolm_search.client import SearchClient
from kolm_search.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.planners import DefaultQueryPlanner
from kolm_search.ports import Embedder, QueryPlanner
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever

__all__ = ["bm25", "dense", "hybrid", "hybrid_plus"]


def _options(options: SearchPipelineOptions | dict[str, Any] | None, mode: str) -> SearchPipelineOptions:
    opts = SearchPipelineOptions.coerce(options)
    if options is None or (isinstance(options, dict) and "default_mode" not in options):
        opts.default_mode = mode  # type: ignore[assignment]
    return opts


def _index(documents: Any, kind: type[Any], kwargs: dict[str, Any] | None, name: str) -> Any:
    """``documents`` itself when it is an index of ``kind`` (used as built or loaded; settings
    that would rebuild it are refused), else None."""
    if not isinstance(documents, kind):
        return None
    if kwargs:
        raise KolmValueError(f"{sorted(kwargs)} would rebuild the given {kind.__name__}; it is used as it is "
                             f"(build a new one over its documents, {kind.__name__}(index.table, ...), to change "
                             f"{name})")
    return documents


def bm25(documents: Any, *, planner: QueryPlanner | None = None,
         options: SearchPipelineOptions | dict[str, Any] | None = None, feedback: Any = None,
         feedback_kwargs: dict[str, Any] | None = None, **bm25_kwargs: Any) -> SearchClient:
    """A BM25 client (default mode ``"fulltext"``); ``bm25_kwargs`` go to :class:`BM25Retriever`.

    ``feedback`` (``"rm3"``, ``"bo1"`` or ``"kl"``) adds pseudo-relevance feedback: the
    retriever is then a :class:`FeedbackRetriever` (``feedback_kwargs``: ``fb_docs``,
    ``fb_terms``, ...) around the BM25 one.
    """
    sparse = _index(documents, BM25Retriever, bm25_kwargs, "bm25_kwargs") or BM25Retriever(documents, **bm25_kwargs)
    retriever: BM25Retriever | FeedbackRetriever = sparse
    if feedback is not None:
        retriever = FeedbackRetriever(sparse, feedback, **(feedback_kwargs or {}))
    elif feedback_kwargs:
        raise KolmValueError(f"feedback_kwargs {sorted(feedback_kwargs)} need feedback='rm3', 'bo1' or 'kl'")
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever),
                        _options(options, "fulltext"))


def dense(documents: Any, embedder: Embedder, *, planner: QueryPlanner | None = None,
          options: SearchPipelineOptions | dict[str, Any] | None = None, **dense_kwargs: Any) -> SearchClient:
    """A dense client (default mode ``"vector"``); ``dense_kwargs`` go to :class:`DenseRetriever`."""
    retriever = _index(documents, DenseRetriever, dense_kwargs, "dense_kwargs") or DenseRetriever(
        documents, embedder, **dense_kwargs)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "vector"))


def hybrid(documents: Any, embedder: Embedder, k: float = 60, *, weights: list[float] | None = None,
           planner: QueryPlanner | None = None, options: SearchPipelineOptions | dict[str, Any] | None = None,
           bm25_kwargs: dict[str, Any] | None = None, dense_kwargs: dict[str, Any] | None = None,
           embeddings: Any = None) -> SearchClient:
    """BM25 + dense fused by RRF (``k``; optional ``weights`` [bm25, dense]); mode ``"hybrid"``.

    ``embeddings`` (n_docs, d) skips embedding the corpus when already computed.
    """
    table = DocumentTable.coerce(documents)
    sparse = _index(documents, BM25Retriever, bm25_kwargs, "bm25_kwargs") or BM25Retriever(table, **(bm25_kwargs or {}))
    given = {**(dense_kwargs or {}), **({} if embeddings is None else {"embeddings": embeddings})}
    vec = _index(documents, DenseRetriever, given, "dense_kwargs") or DenseRetriever(
        table, embedder, embeddings=embeddings, **(dense_kwargs or {}))
    retriever = CompositeRetriever([sparse, vec], k=k, weights=weights)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "hybrid"))


def hybrid_plus(documents: Any, embedder: Embedder, *, k: float = 60, depth: int | None = 1000,
                feedback: Any = "bo1", feedback_kwargs: dict[str, Any] | None = None, lsa_components: int = 128,
                lsa_seed: int = 0, planner: QueryPlanner | None = None,
                options: SearchPipelineOptions | dict[str, Any] | None = None,
                bm25_kwargs: dict[str, Any] | None = None, dense_kwargs: dict[str, Any] | None = None,
                embeddings: Any = None) -> SearchClient:
    """:func:`hybrid` with Bo1 feedback on the BM25 side, an LSA retriever and deeper candidate
    lists; mode ``"hybrid"``.

    The pipeline, every piece public and documented: a
    :class:`~kolm_search.retrievers.composite.CompositeRetriever` fusing by RRF (``k``) the
    ``depth`` best documents of

    - :class:`~kolm_search.retrievers.feedback.FeedbackRetriever` (``feedback``: Bo1 with
      Terrier's defaults, 3 documents and 10 terms) around :class:`BM25Retriever`: weighted
      pseudo-relevance feedback on the index's analysed terms;
    - :class:`DenseRetriever` over ``embedder``, for the original query;
    - :class:`DenseRetriever` over an :class:`~kolm_search.adapters.LSAEmbedder` of
      ``lsa_components`` dimensions fitted on the corpus (``embed_queries=True``: it embeds
      the queries with its own model), for the original query.

    Where the defaults come from: ``benchmarks/bench_recipe.py`` cross-validates (5 folds over
    queries, ten seeds of the split) a grid of sparse child (BM25; Bo1, KL or RM3 feedback),
    text expansion of every child's query by an ``RM3Expander`` planner (off, 5 x 30), LSA
    (none, 128) and ``k`` (20, 60) at depth 1000 on Cranfield; the figures are in
    ``benchmarks/README.md``. The defaults are the best setting that leaves the dense children
    the original query (the text planner appends stemmed terms, which a dense model was not
    trained on; on Cranfield it adds about 0.007 nDCG@10, a gain not expected to carry over):
    Bo1, the steadiest of the three feedback models there, and ``k`` 60, the usual RRF
    constant, which every fold of every split chose over 20. Every part is unsupervised: the corpus alone fits LSA and feeds Bo1; only the choice
    among the grid's settings saw judgements.

    Parameters
    ----------
    documents, embedder, options, bm25_kwargs, dense_kwargs, embeddings
        As for :func:`hybrid`.
    k : float, default 60
        RRF constant of the three children's fusion.
    depth : int or None, default 1000
        Candidates each child gives the fusion (at least the requested page); None: the
        page's size, as :func:`hybrid`.
    feedback : {"bo1", "rm3", "kl"} or None, default "bo1"
        Feedback model of the sparse child; None: plain BM25.
    feedback_kwargs : dict, optional
        Passed to :class:`~kolm_search.retrievers.feedback.FeedbackRetriever` (``fb_docs``,
        ``fb_terms``, ...).
    lsa_components, lsa_seed : int, default 128 and 0
        LSA dimensions and the seed of its SVD.
    planner : QueryPlanner, optional
        Default :class:`~kolm_search.planners.DefaultQueryPlanner`; e.g.
        ``ExpandingQueryPlanner(RM3Expander(bm25, fb_docs=5, fb_terms=30), max_queries=2)``
        expands every child's query text.
    """
    from kolm_search.adapters.lsa import LSAEmbedder

    table = DocumentTable.coerce(documents)
    bm25_retriever = BM25Retriever(table, **(bm25_kwargs or {}))
    sparse: BM25Retriever | FeedbackRetriever = bm25_retriever
    if feedback is not None:
        sparse = FeedbackRetriever(bm25_retriever, feedback, **(feedback_kwargs or {}))
    elif feedback_kwargs:
        raise KolmValueError(f"feedback_kwargs {sorted(feedback_kwargs)} need feedback='rm3', 'bo1' or 'kl'")
    vec = DenseRetriever(table, embedder, embeddings=embeddings, **(dense_kwargs or {}))
    lsa_model = LSAEmbedder(table.texts(vec.fields), n_components=lsa_components, seed=lsa_seed)
    lsa = DenseRetriever(table, lsa_model, fields=vec.fields, embed_queries=True)
    retriever = CompositeRetriever([sparse, vec, lsa], k=k, depth=depth)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "hybrid"))
