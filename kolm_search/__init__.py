"""kolm_search: build, run and measure search pipelines on a vectorised engine.

The public contract is a Python port of the kolm-search reference (``SearchClient``,
``SearchPipeline``, the ports, ``CompositeRetriever``, RRF); underneath, candidates travel as
columnar arrays and fusion, top-k and metrics run as Numba kernels. Importing the package has
no side effects, loads no numba (kernels compile on first use, once, cached on disk) and
needs none of the optional extras.

Here: what users call. Building blocks live in their modules: ``kolm_search.io`` (files,
datasets), ``kolm_search.fusion`` (``fuse_frame``, normalisations), ``kolm_search.adapters``
(a real implementation of every port), ``kolm_search.distributed`` (Dask).

The package's layout (README, "Layout"): ``contract/`` (the spec: client, pipeline, stage runner,
ports), ``engine/`` (ids, runs, frames, the document table, text, filters), ``recipes/`` (presets,
saved clients), ``jobs/`` (batch re-ranking), ``cli/``, beside ``retrievers/``, ``fusion/``,
``evaluation/``, ``adapters/``, ``io/``, ``distributed/`` and ``_kernels/``. The modules the
documentation named at the package root before that layout keep their old paths (``_OLD_PATHS``).
"""

import sys as _sys

from kolm_search.compose import Stage, as_stage
from kolm_search.contract import ports, stages
from kolm_search.contract.batch import BatchResult
from kolm_search.contract.client import SearchClient
from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.pipeline import SearchPipeline
from kolm_search.contract.planners import DefaultQueryPlanner, ExpandingQueryPlanner
from kolm_search.contract.ports import (
    BatchRetriever,
    CacheStore,
    Deduplicator,
    Embedder,
    IntentClassifier,
    Logger,
    QueryExpander,
    QueryPlanner,
    Reranker,
    Retriever,
    Synthesizer,
    Telemetry,
)
from kolm_search.engine import doctable, filters, ids, interop, runs, selection
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.text import Tokenizer
from kolm_search.engine.tokenizers import register_tokenizer
from kolm_search.errors import (
    PIPELINE_STAGES,
    DownloadError,
    FrameValidationError,
    KolmError,
    KolmTypeError,
    KolmValueError,
    SchemaIssue,
    SchemaValidationError,
    SearchError,
)
from kolm_search.evaluation import (
    Experiment,
    compare,
    compare_runs,
    cross_validate,
    evaluate,
    leave_one_collection_out,
    optimize_fusion,
    precision_recall_curve,
)
from kolm_search.evaluation.optimize import fit_fusion
from kolm_search.fusion import FittedFusion, fuse, merge_with_rrf, rrf_score
from kolm_search.io import Dataset, load_dataset, read_qrels, read_run, write_qrels, write_run
from kolm_search.jobs import rerank
from kolm_search.recipes import presets
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse
from kolm_search.types import (
    QueryPlan,
    SearchDocument,
    SearchMode,
    SearchPagination,
    SearchPipelineContext,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
)

__version__ = "0.1.0"

#: ``kolm_search.<old>`` -> the module now in a package: ``import kolm_search.ports`` (and
#: ``from kolm_search.ports import Updatable``, ``mock.patch("kolm_search.ports....")``) reaches
#: the very module ``kolm_search.contract.ports``; pinned by ``tests/test_old_paths.py``.
_OLD_PATHS = {"doctable": doctable, "filters": filters, "ids": ids, "interop": interop, "ports": ports,
              "presets": presets, "rerank": rerank, "runs": runs, "selection": selection, "stages": stages}
for _old, _module in _OLD_PATHS.items():
    _sys.modules.setdefault(f"{__name__}.{_old}", _module)
del _old, _module

__all__ = [
    "BM25Retriever",
    "BatchResult",
    "BatchRetriever",
    "CacheStore",
    "CandidateFrame",
    "CompositeRetriever",
    "Dataset",
    "Deduplicator",
    "DefaultQueryPlanner",
    "DenseRetriever",
    "DocumentTable",
    "DownloadError",
    "Embedder",
    "ExpandingQueryPlanner",
    "Experiment",
    "FeedbackRetriever",
    "FittedFusion",
    "FrameValidationError",
    "Fuse",
    "IntentClassifier",
    "KolmError",
    "KolmTypeError",
    "KolmValueError",
    "Logger",
    "PIPELINE_STAGES",
    "QueryBatch",
    "QueryExpander",
    "QueryPlan",
    "QueryPlanner",
    "Reranker",
    "Retriever",
    "SchemaIssue",
    "SchemaValidationError",
    "SearchClient",
    "SearchDocument",
    "SearchError",
    "SearchMode",
    "SearchPagination",
    "SearchPipeline",
    "SearchPipelineContext",
    "SearchPipelineModules",
    "SearchPipelineOptions",
    "SearchRequest",
    "SearchResponse",
    "SearchResponseMetadata",
    "Stage",
    "Synthesizer",
    "Telemetry",
    "Tokenizer",
    "__version__",
    "as_stage",
    "compare",
    "compare_runs",
    "cross_validate",
    "evaluate",
    "fit_fusion",
    "fuse",
    "leave_one_collection_out",
    "load_dataset",
    "merge_with_rrf",
    "optimize_fusion",
    "precision_recall_curve",
    "presets",
    "read_qrels",
    "read_run",
    "register_tokenizer",
    "rrf_score",
    "write_qrels",
    "write_run",
]
