"""How deep an experiment's pipelines will ask each of their stages, read before any runs.

A retrieving stage that declares itself prefix-stable for a batch
(:meth:`~kolm_search.compose.stage.Stage.prefix_stable`: BM25, exact dense) is computed once
per :func:`~kolm_search.compose.runner.sharing` block and cut to each depth asked. To compute
it once whatever the order of the pipelines (``bm25 % 10``, ``bm25 % 50 >> r``, ``bm25`` at a
limit of 20 run BM25 at 50, once), an :class:`~kolm_search.evaluation.Experiment` first walks
each pipeline as it would run (:func:`planned_depths`): every stage says which stages it runs
and with which batch (:meth:`~kolm_search.compose.stage.Stage.asks`: ``a % k`` asks ``a`` for
``k``, ``a >> b`` passes its batch to both, a fusion asks its children ``depth`` deep), and the
deepest limit each prefix-stable stage is asked at is kept under its fingerprint
(:attr:`~kolm_search.compose.runner.RunState.planned`), where the runner reads it.

A stage that declares nothing (``asks`` None: a user's stage) ends the walk there: the stages
it runs are shared as they are met, as before. The plan only chooses how deep a prefix-stable
stage is computed before it is cut, so a plan that is wrong (a stage asking deeper or less
deep than it declared) costs a second search or a deeper one, never a different output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kolm_search.compose.fingerprints import fingerprints_once
from kolm_search.compose.queries import PreparedQueries, group_batch
from kolm_search.compose.runner import settle, stage_key
from kolm_search.compose.stage import Stage
from kolm_search.engine.candidate_frame import QueryBatch

__all__ = ["asked_depths", "planned_depths"]


def asked_depths(stage: Stage, batch: QueryBatch, found: dict[str, int]) -> None:
    """Record in ``found`` (stage fingerprint -> deepest limit) the limit at which ``stage`` and
    every stage it runs, as far as they declare it (:meth:`Stage.asks`), are asked when ``stage``
    is asked for ``batch``; only stages prefix-stable for the batch they are given, and with a
    fingerprint, are recorded (the runner widens no other)."""
    todo: list[tuple[Stage, QueryBatch]] = [(stage, batch)]
    while todo:  # (a composition is acyclic: check_acyclic)
        node, asked = todo.pop()
        if node.prefix_stable(asked):
            fp, persistent = stage_key(node)  # (no fingerprint: shared by identity, never widened)
            if persistent and asked.limit > found.get(fp, 0):
                found[fp] = asked.limit
        todo += node.asks(asked) or []


def planned_depths(pipelines: Iterable[Any], prepared: PreparedQueries) -> dict[str, int]:
    """The deepest limit every prefix-stable stage of ``pipelines`` (the stages among them) is
    asked at when each is run over ``prepared`` (as :func:`~kolm_search.compose.queries.run_coded`
    runs it: indexes settled, one batch per group over the pipeline's table), by stage fingerprint.
    A pipeline whose walk fails is left out of the plan: its own run meets the failure, where
    the experiment names the pipeline."""
    found: dict[str, int] = {}
    with fingerprints_once():  # (stages shared by the pipelines fingerprinted once)
        for stage in pipelines:
            if not isinstance(stage, Stage) or not stage.is_source:
                continue
            mine: dict[str, int] = {}
            try:
                settle(stage)  # (as run_coded: the table read is the one the search reads)
                table = getattr(stage, "table", None)
                if table is not None:
                    for group in range(len(prepared.groups)):
                        asked_depths(stage, replace(group_batch(prepared, group, table), table=table), mine)
            except Exception:  # (raised again, named, when the pipeline runs)
                continue
            for fp, limit in mine.items():
                found[fp] = max(limit, found.get(fp, 0))
    return found
