"""Ready-made clients: ``bm25()``, ``dense()``, ``hybrid()`` (the recommended default) and the
deprecated ``hybrid_plus()``.

Each is a stage expression (:mod:`kolm_search.compose`) in a client: ``bm25()``'s retriever
is a :class:`BM25Retriever` (a stage), ``hybrid()``'s is ``Fuse(bm25, dense, k=60)``. Each
takes the corpus (``SearchDocument``s, a DataFrame with ``id`` and ``content``, or a
:class:`DocumentTable`) or an index built or loaded before (``bm25(BM25Retriever.load(path))``:
used as it is, nothing rebuilt; another kind of index gives its documents) and returns a
:class:`SearchClient` whose retriever has the columnar batch path. Every built pipeline is
plain arrays plus configuration, so it pickles and travels to worker processes.
"""

from __future__ import annotations

import warnings
from typing import Any

from kolm_search.contract.client import SearchClient
from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.contract.ports import Embedder, QueryPlanner
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse

__all__ = ["bm25", "dense", "hybrid", "hybrid_plus"]

HYBRID_PLUS_DEPRECATED = (
    "presets.hybrid_plus is deprecated and will be removed: its gain over presets.hybrid held on Cranfield "
    "only (it lost nDCG@10 on average on other collections); use presets.hybrid (see benchmarks/README.md, "
    "'Relevance recipe')")


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
           depth: int | None = None, planner: QueryPlanner | None = None,
           options: SearchPipelineOptions | dict[str, Any] | None = None,
           bm25_kwargs: dict[str, Any] | None = None, dense_kwargs: dict[str, Any] | None = None,
           embeddings: Any = None) -> SearchClient:
    """BM25 + dense fused by RRF; mode ``"hybrid"``. The recommended default.

    Exactly the expression ``Fuse(bm25, dense, k=k, weights=weights, depth=depth)``
    (:class:`~kolm_search.compose.Fuse`, a
    :class:`~kolm_search.retrievers.composite.CompositeRetriever`) fusing by RRF (``k``,
    default 60; optional ``weights`` [bm25, dense]) the lists of a
    :class:`BM25Retriever` (Lucene variant, k1 1.5, b 0.75, English stopwords and stemming,
    over title and content) and an exact-cosine :class:`DenseRetriever` over ``embedder``
    (title and content). Each child gives the fusion ``offset + limit`` documents, or
    ``depth`` when it is larger.

    How it was checked (``benchmarks/bench_recipe.py``, tables in ``benchmarks/README.md``):
    with the packaged MiniLM it equals bm25s + numpy's exact cosine top-k + ranx's RRF to
    0.0001 nDCG@10 on the four development collections (cranfield, med, npl, lisa), and no
    variant of a 60-candidate grid of unsupervised settings (score normalisations, RRF ``k``,
    guarded Bo1 feedback, BM25 parameters, fused depth, query-adaptive weights) chosen by
    leave-one-collection-out beat it there. Asked for 10 results with the default ``depth``,
    each child is cut at 10, which scored lower than ``depth=100`` on three of the four.

    Parameters
    ----------
    depth : int, optional
        Candidates each child gives the fusion (at least the requested page). Default: the
        page (the spec's behaviour).
    embeddings : float32 (n_docs, d), optional
        The corpus's vectors when already computed (skips embedding it).
    """
    table = DocumentTable.coerce(documents)
    sparse = _index(documents, BM25Retriever, bm25_kwargs, "bm25_kwargs") or BM25Retriever(table, **(bm25_kwargs or {}))
    given = {**(dense_kwargs or {}), **({} if embeddings is None else {"embeddings": embeddings})}
    vec = _index(documents, DenseRetriever, given, "dense_kwargs") or DenseRetriever(
        table, embedder, embeddings=embeddings, **(dense_kwargs or {}))
    retriever = Fuse(sparse, vec, k=k, weights=weights, depth=depth)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "hybrid"))


def hybrid_plus(documents: Any, embedder: Embedder, *, k: float = 60, depth: int | None = 1000,
                feedback: Any = "bo1", feedback_kwargs: dict[str, Any] | None = None, lsa_components: int = 128,
                lsa_seed: int = 0, planner: QueryPlanner | None = None,
                options: SearchPipelineOptions | dict[str, Any] | None = None,
                bm25_kwargs: dict[str, Any] | None = None, dense_kwargs: dict[str, Any] | None = None,
                embeddings: Any = None) -> SearchClient:
    """Deprecated: use :func:`hybrid`. :func:`hybrid` with Bo1 feedback on the BM25 side, an
    LSA retriever and deeper candidate lists; mode ``"hybrid"``. Warns ``DeprecationWarning``.

    Its settings were chosen by cross-validation over Cranfield's queries, where it beat
    :func:`hybrid` by +0.020 nDCG@10; that gain did not carry to other collections. On eight
    collections the project does not have it lost 0.023 on average (most of it the LSA child's
    equal vote where LSA is weak); on the four development collections, against
    :func:`hybrid` asked for as many results, +0.018 on cranfield, +0.001 on med, -0.073 on npl
    (p < 0.001), +0.014 on lisa: -0.010 on their mean (``benchmarks/bench_recipe.py``). It
    still builds the pipeline below, so old results can be reproduced; it will be removed.

    The pipeline: ``Fuse(sparse, dense, lsa, k=k, depth=depth)`` (:class:`~kolm_search.compose.Fuse`)
    fusing by RRF (``k``) the ``depth`` best documents of

    - :class:`~kolm_search.retrievers.feedback.FeedbackRetriever` (``feedback``: Bo1 with
      Terrier's defaults, 3 documents and 10 terms) around :class:`BM25Retriever`;
    - :class:`DenseRetriever` over ``embedder``, for the original query;
    - :class:`DenseRetriever` over an :class:`~kolm_search.adapters.LSAEmbedder` of
      ``lsa_components`` dimensions fitted on the corpus (``embed_queries=True``: it embeds
      the queries with its own model), for the original query.

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
        Default :class:`~kolm_search.contract.planners.DefaultQueryPlanner`; e.g.
        ``ExpandingQueryPlanner(FeedbackTermExpander(bm25, fb_docs=5, fb_terms=30), max_queries=2)``
        expands every child's query text.
    """
    from kolm_search.adapters.lsa import LSAEmbedder

    warnings.warn(HYBRID_PLUS_DEPRECATED, DeprecationWarning, stacklevel=2)
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
    retriever = Fuse(sparse, vec, lsa, k=k, depth=depth)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "hybrid"))
