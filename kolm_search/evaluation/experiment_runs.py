"""An experiment's runs by pipeline name (:class:`Runs`): run DataFrames made when first asked
for, and the runs still held as codes measured from their codes
(:mod:`kolm_search.evaluation.coded_runs`), several together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any, Literal

import pandas as pd

from kolm_search.compose.queries import CodedRun
from kolm_search.evaluation.coded_runs import (
    Measured,
    QrelsCodes,
    chunks,
    evaluate_coded,
    evaluate_coded_together,
)
from kolm_search.evaluation.measure_pass import prepare_qrels, settings
from kolm_search.evaluation.metrics import evaluate
from kolm_search.evaluation.self_hits import drop_self_hits, wants_self_hits_dropped

__all__ = ["Runs"]


class Runs(MutableMapping[str, pd.DataFrame]):
    """An experiment's runs by pipeline name, in the order they were set: a mapping of run
    DataFrames whose stage pipelines' DataFrames are made when first asked for (from the
    :class:`~kolm_search.compose.queries.CodedRun` the pipeline returned or the run cache read,
    then kept), so that running an experiment looks no document id up until a run is used;
    :meth:`evaluate` measures the runs still held as codes from their codes. Setting a name
    stores a DataFrame."""

    def __init__(self) -> None:
        self._frames: dict[str, pd.DataFrame] = {}
        self._coded: dict[str, tuple[CodedRun, int | None]] = {}
        self._pending: dict[str, Callable[[], tuple[CodedRun, int | None]]] = {}
        self._order: dict[str, None] = {}
        self._own: set[str] = set()

    def set_coded(self, name: str, run: CodedRun, self_hits_limit: int | None = None) -> None:
        """Keep ``run`` under ``name``; its DataFrame (:meth:`CodedRun.frame`, with
        ``self_hits_limit`` cut by ``drop_self_hits(frame, self_hits_limit)``) is made when asked for."""
        self._frames.pop(name, None)
        self._pending.pop(name, None)
        self._coded[name] = (run, self_hits_limit)
        self._order[name] = None
        self._own.add(name)

    def set_pending(self, name: str, load: Callable[[], tuple[CodedRun, int | None]]) -> None:
        """Keep under ``name`` what makes its run: ``load()`` returns the arguments of
        :meth:`set_coded` and is called when the run is first asked for (an experiment whose
        measure table was read from its cache reads no run until one is used)."""
        self._frames.pop(name, None)
        self._coded.pop(name, None)
        self._pending[name] = load
        self._order[name] = None
        self._own.add(name)

    def computed(self, name: str) -> bool:
        """True when the run under ``name`` was set by :meth:`set_coded` / :meth:`set_pending`, not by a caller."""
        return name in self._own

    def _load(self, name: str) -> None:
        load = self._pending.pop(name, None)
        if load is not None:
            self.set_coded(name, *load())

    def coded(self, name: str) -> CodedRun | None:
        """The coded run kept under ``name`` whose DataFrame is ``run.frame()`` as is, else None."""
        self._load(name)
        found = self._coded.get(name)
        return found[0] if found is not None and found[1] is None else None

    def __getitem__(self, name: str) -> pd.DataFrame:
        found = self._frames.get(name)
        if found is not None:
            return found
        self._load(name)
        run, limit = self._coded[name]  # KeyError for a name never set
        frame = run.frame()
        frame = frame if limit is None else drop_self_hits(frame, limit)[0]
        self._frames[name] = frame
        del self._coded[name]
        return frame

    def __setitem__(self, name: str, run: pd.DataFrame) -> None:
        self._coded.pop(name, None)
        self._pending.pop(name, None)
        self._own.discard(name)
        self._frames[name] = run
        self._order[name] = None

    def __delitem__(self, name: str) -> None:
        if name not in self._order:
            raise KeyError(name)
        self._frames.pop(name, None)
        self._coded.pop(name, None)
        self._pending.pop(name, None)
        self._own.discard(name)
        del self._order[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order

    def __repr__(self) -> str:
        return f"Runs({list(self._order)})"

    def evaluate(self, qrels: Any, metrics: Sequence[Any] | str | Any = ("ndcg@10",), *, relevance_level: int = 1,
                 missing: Literal["ignore", "zero"] = "ignore", n_threads: int | None = None,
                 drop_self_hits: bool | None = None, judged_only: bool = False) -> dict[str, pd.DataFrame]:
        """Each run's ``evaluate(self[name], qrels, metrics, per_query=True, ...)``, by name in
        order. A run held as codes is measured from them, its DataFrame not made: the qrels are
        mapped once per (document table, queries) for all of them (:class:`QrelsCodes`)."""
        found = self.measure(qrels, metrics, relevance_level=relevance_level, missing=missing, n_threads=n_threads,
                             drop_self_hits=drop_self_hits, judged_only=judged_only)
        return {name: t.frame() if isinstance(t, Measured) else t for name, t in found.items()}

    def measure(self, qrels: Any, metrics: Sequence[Any] | str | Any = ("ndcg@10",), *, relevance_level: int = 1,
                missing: Literal["ignore", "zero"] = "ignore", n_threads: int | None = None,
                drop_self_hits: bool | None = None, judged_only: bool = False,
                ) -> dict[str, pd.DataFrame | Measured]:
        """:meth:`evaluate`, a run measured from its codes as its :class:`Measured` values (``compare`` reads them)."""
        specs, keys = settings(metrics, relevance_level, missing)
        prepared_qrels: tuple[pd.DataFrame, Any, Any] | None = None
        mapped: list[QrelsCodes] = []
        out: dict[str, pd.DataFrame | Measured] = {}
        together: dict[str, Measured | None] = {}
        for name in self:
            self._load(name)
        if any(name in self._coded for name in self):  # the runs over one table and queries in one pass
            prepared_qrels = prepare_qrels(qrels, specs)
            groups: dict[int, tuple[QrelsCodes, list[str]]] = {}
            for name in self:
                coded = self._coded.get(name)
                codes = None if coded is None else self._codes_for(coded[0], prepared_qrels, mapped)
                if coded is not None and codes is not None:
                    groups.setdefault(id(codes), (codes, []))[1].append(name)
            for codes, names in groups.values():
                for chunk in chunks(names, [sum(len(p[1]) for p in self._coded[n][0].parts) for n in names]):
                    tables = evaluate_coded_together(
                        [self._coded[n] for n in chunk], codes, specs, keys,
                        drop=wants_self_hits_dropped(prepared_qrels[0], drop_self_hits),
                        relevance_level=relevance_level, judged_only=judged_only, missing=missing,
                        n_threads=n_threads)
                    if tables is not None:
                        together.update(zip(chunk, tables, strict=True))
        for name in self:
            coded = self._coded.get(name)
            table: pd.DataFrame | Measured | None = together.get(name)
            if table is None and coded is not None:
                if prepared_qrels is None:
                    prepared_qrels = prepare_qrels(qrels, specs)
                qrels_df, _, subtopics = prepared_qrels
                codes = self._codes_for(coded[0], prepared_qrels, mapped)
                if codes is not None:
                    table = evaluate_coded(coded[0], codes, specs, keys, self_hits_limit=coded[1],
                                           drop=wants_self_hits_dropped(qrels_df, drop_self_hits),
                                           relevance_level=relevance_level, judged_only=judged_only,
                                           missing=missing, n_threads=n_threads, subtopics=subtopics,
                                           values_only=True)
            if table is None:  # a DataFrame, or a run that its DataFrame evaluates (or refuses)
                table = evaluate(self[name], qrels, metrics, per_query=True, relevance_level=relevance_level,
                                 missing=missing, n_threads=n_threads, drop_self_hits=drop_self_hits,
                                 judged_only=judged_only)
            out[name] = table
        return out

    @staticmethod
    def _codes_for(run: CodedRun, prepared_qrels: tuple[pd.DataFrame, Any, Any],
                   mapped: list[QrelsCodes]) -> QrelsCodes | None:
        """The qrels' codes for ``run`` (made once per table and queries), None when its query
        ids are not distinct as strings."""
        prepared = run.prepared
        for codes in mapped:
            if codes.matches(prepared, run.table):
                return codes if codes.distinct else None
        qrels_df, rel, _ = prepared_qrels
        codes = QrelsCodes(qrels_df, rel, prepared, run.table)
        mapped.append(codes)
        return codes if codes.distinct else None

