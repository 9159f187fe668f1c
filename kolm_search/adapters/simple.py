"""Adapters with no third-party needs: telemetry, exact dedup, synonym expansion, intent."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kolm_search._bridge import inline, off_loop, run_sync
from kolm_search._params import real
from kolm_search.contract.planners import normalize_query
from kolm_search.contract.port_calls import embed_all
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument

__all__ = [
    "EmbeddingIntentClassifier",
    "ExactDeduplicator",
    "LoggingTelemetry",
    "NearDuplicateDeduplicator",
    "SynonymExpander",
]


class LoggingTelemetry:
    """``Telemetry`` over stdlib ``logging``: one record per event, payload as JSON.

    >>> LoggingTelemetry(logging.getLogger("search")).track("search.completed", {"duration_ms": 3.2})
    """

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.logger = logger or logging.getLogger("kolm_search.telemetry")
        self.level = level

    def track(self, event: str, payload: dict[str, Any]) -> None:
        self.logger.log(self.level, "%s %s", event, json.dumps(payload, default=str, sort_keys=True),
                        extra={"event": event, "payload": payload})


class ExactDeduplicator:
    """Drops exact duplicates, keeping the best-ranked copy: first by id, then by content.

    Content is compared after lowercasing and collapsing white space (SHA-256 of the result).
    A :class:`~kolm_search.contract.ports.ReportsDuplicates`: :meth:`deduplicate_pairs` also returns the
    ``(dropped_id, kept_id)`` pairs (``last_dropped`` keeps the latest call's, for inspection).
    """

    def __init__(self, by_content: bool = True) -> None:
        self.by_content = by_content
        self.last_dropped: list[tuple[str, str]] = []

    def deduplicate(self, docs: Sequence[SearchDocument]) -> list[SearchDocument]:
        return self.deduplicate_pairs(docs)[0]

    def deduplicate_pairs(self, docs: Sequence[SearchDocument]) -> tuple[list[SearchDocument], list[tuple[str, str]]]:
        seen_ids: set[str] = set()
        seen_content: dict[str, str] = {}
        out = []
        dropped = []
        for doc in docs:
            if doc.id in seen_ids:
                dropped.append((doc.id, doc.id))
                continue
            if self.by_content:
                digest = hashlib.sha256(normalize_query(doc.content).encode("utf-8")).hexdigest()
                if digest in seen_content:
                    dropped.append((doc.id, seen_content[digest]))
                    continue
                seen_content[digest] = doc.id
            seen_ids.add(doc.id)
            out.append(doc)
        self.last_dropped = dropped
        return out, dropped


class SynonymExpander:
    """``QueryExpander`` from a synonym table: one alternative per (word, synonym).

    Parameters
    ----------
    table : mapping word -> list of synonyms, or a path to a JSON object or to a text file
        with lines ``word: syn1, syn2`` (``#`` starts a comment). Matching is case-insensitive
        on whole words; multi-word keys are allowed.
    """

    def __init__(self, table: Mapping[str, Sequence[str]] | str | Path) -> None:
        raw = self._load(table) if isinstance(table, (str, Path)) else dict(table)
        self.table: dict[str, list[str]] = {}
        for word, syns in raw.items():
            if isinstance(syns, str) or not isinstance(syns, Sequence):
                raise KolmValueError(f"synonyms of {word!r} must be a list of strings, got {syns!r}")
            self.table[normalize_query(word)] = [normalize_query(s) for s in syns if normalize_query(s)]

    @staticmethod
    def _load(path: str | Path) -> dict[str, list[str]]:
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            data = json.loads(text)
            if not isinstance(data, dict):
                raise KolmValueError(f"{p}: expected a JSON object word -> [synonyms]")
            return data
        out: dict[str, list[str]] = {}
        for lineno, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if ":" not in line:
                raise KolmValueError(f"{p}:{lineno}: expected 'word: synonym, synonym'")
            word, syns = line.split(":", 1)
            out[word.strip()] = [s.strip() for s in syns.split(",") if s.strip()]
        return out

    def expand(self, query: str) -> list[str]:
        q = normalize_query(query)
        out: list[str] = []
        for word, syns in self.table.items():
            pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
            if pattern.search(q):
                out.extend(pattern.sub(s, q) for s in syns)
        return [x for x in dict.fromkeys(out) if x != q]


class EmbeddingIntentClassifier:
    """``IntentClassifier`` by nearest centroid of labelled example queries.

    Parameters
    ----------
    embedder : Embedder
    examples : dict label -> list of example queries
    threshold : float, default 0.5
        Below this cosine similarity to the nearest centroid the intent is ``None``
        (inconclusive, as the spec says).
    """

    def __init__(self, embedder: Any, examples: Mapping[str, Sequence[str]], threshold: float = 0.5) -> None:
        if not examples or any(not v for v in examples.values()):
            raise KolmValueError("examples must give at least one query for every label")
        self.embedder = embedder
        self.labels = list(examples)
        self.threshold = real("threshold", threshold)
        rows = []
        for label in self.labels:
            vecs = run_sync(embed_all(embedder, [normalize_query(t) for t in examples[label]], call=inline))
            c = vecs.mean(axis=0)
            rows.append(c / (np.linalg.norm(c) or 1.0))
        self.centroids = np.stack(rows).astype(np.float32)

    async def classify(self, query: str) -> str | None:
        vec = np.asarray(await off_loop(self.embedder.embed, query), dtype=np.float32)
        norm = float(np.linalg.norm(vec))
        if norm == 0:
            return None
        sims = self.centroids @ (vec / norm)
        best = int(np.argmax(sims))
        return self.labels[best] if sims[best] >= self.threshold else None


class NearDuplicateDeduplicator:
    """Drops near duplicates: cosine similarity of embeddings at or above ``threshold``.

    The best-ranked copy is kept (greedy in rank order, one matrix product). A
    :class:`~kolm_search.contract.ports.ReportsDuplicates`, as :class:`ExactDeduplicator`.
    """

    def __init__(self, embedder: Any, threshold: float = 0.95) -> None:
        self.embedder = embedder
        self.threshold = real("threshold", threshold, low=0.0, high=1.0, closed="right")
        self.last_dropped: list[tuple[str, str]] = []

    async def deduplicate(self, docs: Sequence[SearchDocument]) -> list[SearchDocument]:
        return (await self.deduplicate_pairs(docs))[0]

    async def deduplicate_pairs(self, docs: Sequence[SearchDocument]) -> tuple[list[SearchDocument],
                                                                                list[tuple[str, str]]]:
        docs = list(docs)
        if len(docs) < 2:
            self.last_dropped = []
            return docs, []
        texts = [f"{d.title} {d.content}" if d.title else d.content for d in docs]
        emb = (await embed_all(self.embedder, texts)).astype(np.float64)
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        emb = emb / np.where(norms > 0, norms, 1.0)
        sims = emb @ emb.T
        kept: list[int] = []
        dropped: list[tuple[str, str]] = []
        for i in range(len(docs)):
            match = next((j for j in kept if sims[i, j] >= self.threshold), None)
            if match is None:
                kept.append(i)
            else:
                dropped.append((docs[i].id, docs[match].id))
        self.last_dropped = dropped
        return [docs[i] for i in kept], dropped
