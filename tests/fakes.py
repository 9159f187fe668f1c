"""Fake ports for the tests: each in a sync and an async flavour, recording calls."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from kolm_search import SearchDocument, SearchPipelineContext
from kolm_search.compose import RerankerStage
from kolm_search.compose.frame_ops import rescored

CORPUS = [
    SearchDocument(id=f"d{i}", content=f"document number {i}", tags=["even" if i % 2 == 0 else "odd"])
    for i in range(30)
]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []


class ListRetriever(Recorder):
    """Returns ``docs`` (default: CORPUS) cut at plan.target_limit."""

    def __init__(self, docs: list[SearchDocument] | None = None, name: str | None = None) -> None:
        super().__init__()
        self.docs = CORPUS if docs is None else docs
        if name:
            self.name = name

    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        self.calls.append(("retrieve", context))
        return list(self.docs[: context.plan.target_limit])


class AsyncListRetriever(ListRetriever):
    async def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().retrieve(context)


class FailingRetriever(Recorder):
    def __init__(self, exc: Exception | None = None, delay: float = 0.0) -> None:
        super().__init__()
        self.exc = exc or RuntimeError("backend down")
        self.delay = delay

    async def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        await asyncio.sleep(self.delay)
        raise self.exc


class SlowRetriever(ListRetriever):
    def __init__(self, delay: float, docs: list[SearchDocument] | None = None) -> None:
        super().__init__(docs)
        self.delay = delay
        self.cancelled = False

    async def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:  # type: ignore[override]
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return super().retrieve(context)


class HashEmbedder(Recorder):
    """Deterministic 8-d embedding from the text's characters."""

    dim = 8

    def embed(self, text: str) -> list[float]:
        self.calls.append(("embed", text))
        return self.vector(text)

    def vector(self, text: str) -> list[float]:
        v = np.zeros(self.dim)
        for i, ch in enumerate(text):
            v[i % self.dim] += ord(ch)
        return list(v / (np.linalg.norm(v) or 1.0))


class AsyncHashEmbedder(HashEmbedder):
    async def embed(self, text: str) -> list[float]:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().embed(text)


class BatchHashEmbedder(HashEmbedder):
    def embed_many(self, texts: list[str]) -> np.ndarray:
        self.calls.append(("embed_many", list(texts)))
        return np.array([self.vector(t) for t in texts])


class FingerprintedEmbedder(BatchHashEmbedder):
    """A hash embedder that declares its fingerprint, so the stages built on it are shared and cached."""

    def fingerprint(self) -> str:
        return "hash-embedder-8"


def judged_cranfield(n_queries: int) -> Any:
    """Cranfield with only its first ``n_queries`` judged queries and their judgements."""
    from kolm_search.io import load_dataset

    data = load_dataset("cranfield")
    keep = set(data.judged_queries()["qid"].iloc[:n_queries])
    data.queries = data.queries[data.queries["qid"].isin(keep)].reset_index(drop=True)
    data.qrels = data.qrels[data.qrels["qid"].isin(keep)].reset_index(drop=True)
    return data


class MemoryCache(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.store: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        self.calls.append(("get", key))
        return self.store.get(key)

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
        self.calls.append(("set", (key, ttl_seconds)))
        self.store[key] = value


class AsyncMemoryCache(MemoryCache):
    async def get(self, key: str) -> Any:  # type: ignore[override]
        return super().get(key)

    async def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:  # type: ignore[override]
        super().set(key, value, ttl_seconds)


class ListTelemetry(Recorder):
    def track(self, event: str, payload: dict[str, Any]) -> None:
        self.calls.append((event, payload))


class ListLogger:
    """Console-like logger (``warn``) recording messages."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, Any]] = []

    def debug(self, message: str, payload: Any = None) -> None:
        self.records.append(("debug", message, payload))

    def info(self, message: str, payload: Any = None) -> None:
        self.records.append(("info", message, payload))

    def warn(self, message: str, payload: Any = None) -> None:
        self.records.append(("warn", message, payload))

    def error(self, message: str, payload: Any = None) -> None:
        self.records.append(("error", message, payload))

    def warnings(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.records if r[0] == "warn"]


class Boom:
    """A port whose every method raises."""

    def __init__(self, exc: Exception | None = None) -> None:
        self.exc = exc or RuntimeError("boom")

    def _raise(self, *args: Any, **kwargs: Any) -> Any:
        raise self.exc

    plan = retrieve = embed = embed_many = deduplicate = rerank = synthesize = classify = _raise
    get = set = track = expand = _raise


class AsyncBoom(Boom):
    async def _araise(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        raise self.exc

    plan = retrieve = embed = embed_many = deduplicate = rerank = synthesize = classify = _araise
    get = set = track = expand = _araise


class Prior(RerankerStage):
    """A columnar reranker: ``score + weight * (doc code % modulus)``, re-sorted; with ``rounded``
    the score is rounded to one decimal first (many ties)."""

    def __init__(self, weight: float, modulus: int = 3, rounded: bool = True) -> None:
        self.weight, self.modulus, self.rounded = weight, modulus, rounded

    def stage_params(self) -> dict[str, Any]:
        return {"weight": self.weight, "modulus": self.modulus, "rounded": self.rounded}

    def transform(self, batch: Any, candidates: Any) -> Any:
        base = np.round(candidates.score, 1) if self.rounded else candidates.score
        return rescored(candidates, base + self.weight * (candidates.doc % self.modulus))


class FlakyShard:
    """A retrieving port over ``inner``'s batch path (a BM25 index) that fails while
    ``down[0]`` is set (``down`` a list the test flips: a shard taken down and brought back);
    its documents path always fails; fingerprinted as ``name``."""

    def __init__(self, inner: Any, down: list[bool], name: str = "flaky-bm25") -> None:
        self.inner, self.table, self.down, self.name = inner, inner.table, down, name

    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        raise RuntimeError("no documents path")

    def retrieve_batch(self, batch: Any) -> Any:
        if self.down[0]:
            raise RuntimeError("shard down")
        return self.inner.retrieve_batch(batch)

    def fingerprint(self) -> str:
        return self.name
