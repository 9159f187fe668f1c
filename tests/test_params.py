"""One validation vocabulary for public arguments: what each check accepts, what it refuses, and
that its error names the argument and the value (and is both a ValueError and a TypeError)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import ExpandingQueryPlanner, SearchPipelineOptions
from kolm_search._params import (
    boolean,
    integer,
    mapping,
    non_negative_int,
    one_of,
    path_exists,
    positive_int,
    probability,
    real,
    seconds,
)
from kolm_search.adapters import InMemoryCache, MMRReranker, NearDuplicateDeduplicator, SynonymExpander
from kolm_search.engine.filters import parse_filter
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmTypeError, KolmValueError, ParameterError
from kolm_search.fusion import rrf_score
from kolm_search.io.trec import read_run
from kolm_search.jobs.rerank import rerank_run
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.postings import Postings


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True), st.booleans(), st.none(),
                       st.text(max_size=3)),
       low=st.one_of(st.none(), st.integers(-5, 5)), high=st.one_of(st.none(), st.integers(-5, 5)))
def test_integer_accepts_exactly_the_ints_in_range(value: Any, low: int | None, high: int | None) -> None:
    ok = (type(value) is int and (low is None or value >= low) and (high is None or value <= high))
    if ok:
        assert integer("n", value, low=low, high=high) == value
    else:
        with pytest.raises(ParameterError, match=r"^n must be an? .*, got ") as info:
            integer("n", value, low=low, high=high)
        assert repr(value) in str(info.value)


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.booleans()),
       closed=st.sampled_from(["both", "left", "right", "neither"]))
def test_real_interval_ends(value: Any, closed: str) -> None:
    left, right = closed in ("both", "left"), closed in ("both", "right")
    x = float(value) if not isinstance(value, bool) else math.nan
    ok = not isinstance(value, bool) and math.isfinite(x) and (x > 0 or (left and x == 0)) and (x < 1 or (right and x == 1))
    if ok:
        assert real("p", value, low=0, high=1, closed=closed) == x  # type: ignore[arg-type]
    else:
        with pytest.raises(ParameterError, match=r"^p must be a finite number in [\[(]0, 1[\])], got "):
            real("p", value, low=0, high=1, closed=closed)  # type: ignore[arg-type]


def test_checks_return_canonical_values_and_name_argument_and_value(tmp_path: Path) -> None:
    assert positive_int("k", np.int64(3)) == 3 and type(positive_int("k", np.int64(3))) is int
    assert non_negative_int("offset", 0) == 0 and positive_int("n", None, none=True) is None
    assert probability("p", 1) == 1.0 and seconds("t", None) is None and seconds("t", 0.5) == 0.5
    assert real("ttl", math.inf, low=0, finite=False) == math.inf
    assert one_of("mode", "vector", ("fulltext", "vector")) == "vector" and boolean("b", np.True_) is True
    assert mapping("filters", {"a": 1}) == {"a": 1} and path_exists("folder", tmp_path, kind="dir") == tmp_path
    cases = [
        (lambda: positive_int("top_k", 0), "top_k must be a positive integer, got 0"),
        (lambda: positive_int("top_k", True), "top_k must be a positive integer, got True"),
        (lambda: non_negative_int("offset", -1), "offset must be a non-negative integer, got -1"),
        (lambda: positive_int("top_n", 1.5, none=True), "top_n must be a positive integer or None, got 1.5"),
        (lambda: probability("lambda_", 2), "lambda_ must be a finite number in [0, 1], got 2"),
        (lambda: real("k", math.nan, low=0), "k must be a finite number >= 0, got nan"),
        (lambda: seconds("timeout", 0), "timeout must be a positive finite number of seconds or None, got 0"),
        (lambda: one_of("mode", "x", ("a", "b")), "mode must be one of ['a', 'b'], got 'x'"),
        (lambda: one_of("mode", ["unhashable"], ("a",)), "mode must be one of ['a'], got ['unhashable']"),
        (lambda: boolean("progress", 1), "progress must be True or False, got 1"),
        (lambda: mapping("filters", [1]), "filters must be a dict, got list [1]"),
        (lambda: path_exists("BEIR folder", tmp_path / "nope"), f"BEIR folder {str(tmp_path / 'nope')!r} does not exist"),
        (lambda: path_exists("run", tmp_path, kind="file"), f"run {str(tmp_path)!r} is not a file"),
    ]
    for call, message in cases:
        with pytest.raises(ParameterError) as info:
            call()
        assert str(info.value) == message
        assert isinstance(info.value, KolmValueError) and isinstance(info.value, KolmTypeError)


PUBLIC_CALLS: list[tuple[str, Any, str]] = [
    ("options", lambda: SearchPipelineOptions(default_limit=0), "default_limit must be a positive integer"),
    ("timeout", lambda: SearchPipelineOptions(stage_timeout_seconds=-1), "stage_timeout_seconds must be"),
    ("mode", lambda: SearchPipelineOptions(default_mode="x"), "default_mode must be one of"),  # type: ignore[arg-type]
    ("mmr", lambda: MMRReranker(None, lambda_=2), "lambda_ must be"),
    ("cache", lambda: InMemoryCache(max_entries=0), "max_entries must be"),
    ("dedup", lambda: NearDuplicateDeduplicator(None, threshold=0), r"threshold must be a finite number in \(0, 1\]"),
    ("rank", lambda: rrf_score(-1), "rank must be a non-negative integer"),
    ("k", lambda: rrf_score(0, k=-1), "k must be a finite number >= 0"),
    ("planner", lambda: ExpandingQueryPlanner(SynonymExpander({}), max_queries=0), "max_queries must be a positive integer"),
    ("rerank_run", lambda: rerank_run(None, None, None, top_k=0), "top_k must be a positive integer"),
    ("bm25", lambda: BM25Retriever(_DOCS, k1=10**400), "k1 must be a finite number >= 0, got 1000"),
    ("bm25 method", lambda: BM25Retriever(_DOCS, method="bm26"), "method must be one of"),  # type: ignore[arg-type]
    ("dense", lambda: DenseRetriever(_DOCS, embeddings=[[1.0]], metric="l2"), "metric must be one of"),  # type: ignore[arg-type]
    ("composite", lambda: CompositeRetriever([BM25Retriever(_DOCS)], depth=0), "depth must be a positive integer or None"),
    ("strategy", lambda: CompositeRetriever([BM25Retriever(_DOCS)], strategy="x"), "strategy must be one of"),  # type: ignore[arg-type]
    ("feedback", lambda: FeedbackRetriever(BM25Retriever(_DOCS), fb_docs=0), "fb_docs must be an integer >= 1, got 0"),
    ("top_k", lambda: BM25Retriever(_DOCS).score_texts(["a"], 0), "k must be a positive integer, got 0"),
    ("n_jobs", lambda: Postings.from_texts(["a"], Tokenizer(), n_jobs=0), "n_jobs must be a positive integer or None"),
    ("chunk_timeout", lambda: Postings.from_texts(["a"], Tokenizer(), chunk_timeout=float("inf")),
     "chunk_timeout must be a positive finite number of seconds or None"),  # every wait has a deadline
    ("tokenizer", lambda: Tokenizer(lowercase="no"), "Tokenizer lowercase must be True or False"),  # type: ignore[arg-type]
    ("filter", lambda: parse_filter(["tags"]), "a filter must be a dict, got list"),
    ("trec", lambda: read_run(Path(".")), "run file '.' is not a file"),
]
_DOCS = [{"id": "a", "content": "a b"}]


@pytest.mark.parametrize(("make", "match"), [c[1:] for c in PUBLIC_CALLS], ids=[c[0] for c in PUBLIC_CALLS])
def test_public_calls_check_their_arguments_with_it(make: Any, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        make()
