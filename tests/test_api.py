"""The public surface: exported names, stage table, errors, types."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kolm_search
from kolm_search import (
    PIPELINE_STAGES,
    QueryPlan,
    SearchDocument,
    SearchError,
    SearchPagination,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
)

EXPECTED_ALL = [
    "Dataset", "DownloadError", "Experiment", "compare", "evaluate", "load_dataset",
    "optimize_fusion", "read_qrels", "read_run", "write_qrels", "write_run",
    "BM25Retriever", "BatchResult", "BatchRetriever", "CandidateFrame", "DenseRetriever", "DocumentTable",
    "QueryBatch", "Tokenizer", "fuse", "presets", "KolmError",
    "CacheStore", "CompositeRetriever", "Deduplicator", "DefaultQueryPlanner", "Embedder",
    "ExpandingQueryPlanner", "FrameValidationError", "IntentClassifier", "KolmTypeError",
    "KolmValueError", "Logger", "PIPELINE_STAGES", "QueryExpander", "QueryPlan", "QueryPlanner",
    "Reranker", "Retriever", "SchemaIssue", "SchemaValidationError", "SearchClient",
    "SearchDocument", "SearchError", "SearchMode", "SearchPagination", "SearchPipeline",
    "SearchPipelineContext", "SearchPipelineModules", "SearchPipelineOptions", "SearchRequest",
    "SearchResponse", "SearchResponseMetadata", "Synthesizer", "Telemetry", "__version__",
    "merge_with_rrf", "rrf_score", "FittedFusion", "fit_fusion", "FeedbackRetriever", "cross_validate",
    "register_tokenizer", "leave_one_collection_out", "compare_runs", "precision_recall_curve",
    "Stage", "as_stage", "Fuse",
]


def test_all_is_sorted_and_pinned() -> None:
    assert kolm_search.__all__ == sorted(kolm_search.__all__)
    assert kolm_search.__all__ == sorted(EXPECTED_ALL)
    for name in kolm_search.__all__:
        assert hasattr(kolm_search, name), name


def test_submodule_all_sorted() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(kolm_search.__path__, "kolm_search."):
        module = importlib.import_module(info.name)
        names = getattr(module, "__all__", None)
        if names is not None:
            assert list(names) == sorted(names), info.name
            for name in names:
                assert hasattr(module, name), (info.name, name)


SPEC_STAGES = {
    "CLIENT": "client", "CACHE_GET": "cache.get", "CACHE_SET": "cache.set", "PLANNER": "planner",
    "INTENT_CLASSIFIER": "intent-classifier", "EMBEDDER": "embedder", "RETRIEVER": "retriever",
    "RERANKER": "reranker", "SYNTHESIZER": "synthesizer", "COMPOSITE_RETRIEVER": "composite-retriever",
}


def test_pipeline_stages_table() -> None:
    assert dict(PIPELINE_STAGES) == SPEC_STAGES
    for key, value in SPEC_STAGES.items():
        assert getattr(PIPELINE_STAGES, key) == value
    with pytest.raises(AttributeError):
        PIPELINE_STAGES.CLIENT = "x"  # type: ignore[misc]
    with pytest.raises(KeyError):
        PIPELINE_STAGES["_KEYS"]


def test_search_error_shape() -> None:
    cause = ValueError("bad")
    err = SearchError("retriever", "Database query failed.", cause=cause)
    assert str(err) == "[retriever] Database query failed." == err.message
    assert err.stage == "retriever" and err.cause is cause and err.__cause__ is cause
    assert SearchError.wrap("x", err) is err


def test_import_has_no_side_effects_and_no_optional_deps() -> None:
    code = (
        "import sys, kolm_search;"
        "bad=[m for m in ('torch','dask','matplotlib','opentelemetry','sentence_transformers','pydantic','numba',"
        "'onnxruntime','httpx') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_response_round_trip_through_dict() -> None:
    resp = SearchResponse(
        request=SearchRequest(query="q", limit=2, filters={"a": [1]}),
        plan=QueryPlan(normalized_query="q", mode="hybrid", target_limit=2, intent="i", metadata={"m": 1}),
        results=[SearchDocument(id="a", content="x", title="t", tags=["k"], metadata={"y": 2}, score=0.5)],
        pagination=SearchPagination(offset=0, limit=2, total_candidates=1),
        duration_ms=1.5,
        answer="ans",
        metadata=SearchResponseMetadata(result_count=1, cache_hit=False),
    )
    assert SearchResponse.from_dict(resp.to_dict()) == resp
    with pytest.raises(ValueError, match="malformed"):
        SearchResponse.from_dict({"request": {}})


def test_query_plan_default_expanded() -> None:
    assert QueryPlan(normalized_query="x", mode="fulltext", target_limit=1).expanded_queries == ["x"]


def test_protocols_runtime_checkable() -> None:
    from tests.fakes import HashEmbedder, ListRetriever

    assert isinstance(ListRetriever(), kolm_search.Retriever)
    assert isinstance(HashEmbedder(), kolm_search.Embedder)
    assert not isinstance(object(), kolm_search.Retriever)
    import logging

    assert isinstance(logging.getLogger("x"), kolm_search.Logger)


def test_kernels_compile_once_with_a_notice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A kernel compiles on first use with a one-line notice, then loads from the disk cache silently."""
    import os

    code = ("import numpy as np, sys; from kolm_search._kernels import load; m = load('mmr');"
            "print(m.mmr_select(np.ones(3), np.eye(3, dtype=np.float32), 0.5, 2).tolist())")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert first.stdout == second.stdout == "[0, 1]\n"
    assert "compiling kernels (first run only)" in first.stderr
    assert "compiling" not in second.stderr and any(tmp_path.rglob("*.nbi"))
