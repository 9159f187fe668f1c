"""Child of the save-kill test: saves over an old index, SIGKILLed at every step, one JSON line each.

``python -m tests.reliability.save_child <work folder> [kind ...]`` builds, for each kind, an old
and a new index (``bm25``, ``dense``, ``feedback``, ``composite``; ``incremental``: the old
composite loaded from the folder, documents added and deleted, saved back, the merge inside
the save), counts the steps of the save (``kolm_search.retrievers._persist._step_hook``), and
for each step ``i`` forks a process that saves the new index over a copy of the old one and
kills itself with SIGKILL at step ``i`` (and one more run that is not killed). Forking keeps
each run to milliseconds. After each, this process loads the folder and prints::

    {"kind", "step", "label", "exit", "outcome", "leftovers"}

``outcome`` is ``"old"`` or ``"new"`` when the folder loads as exactly that index (every saved
array, JSON value, table row and configuration, and the results of a batch of queries),
``"mixed"`` or ``"unloadable: <error>"`` otherwise; ``leftovers`` lists what a clean save over
the folder afterwards leaves besides its own files (must be nothing; checked after the kills in
the first step, while writing the first table, before the switch, at the first removal of an
old file, and after the unkilled run; null for the other steps).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kolm_search import BM25Retriever, CompositeRetriever, DenseRetriever, FeedbackRetriever
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.retrievers import _persist
from tests.conftest import synthetic_corpus

N_DOCS, DIM = 30, 6
QUERIES = ["w1 w2", "w3 w0", "w5 w7 w7"]
KINDS = ("bm25", "dense", "feedback", "composite", "incremental")
LOADERS: dict[str, Callable[[Path], Any]] = {
    "bm25": BM25Retriever.load, "dense": DenseRetriever.load, "feedback": FeedbackRetriever.load,
    "composite": CompositeRetriever.load, "incremental": CompositeRetriever.load}


def _frame(ids: list[str], seed: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"id": ids, "content": synthetic_corpus(len(ids), 12, seed),
                         "source": [f"s{i % 3}" for i in range(len(ids))]})


def _embeddings(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def build(kind: str) -> tuple[Any, Any]:
    """(old, new) of ``kind``: the new one of the same sizes (the same texts under permuted ids,
    other parameters), so that a mix of the two would pass every size check."""
    ids = [f"d{i}" for i in range(N_DOCS)]
    old, new = _frame(ids), _frame(ids[::-1])
    if kind == "bm25":
        return BM25Retriever(old), BM25Retriever(new, k1=1.2)
    if kind == "dense":
        return DenseRetriever(old, embeddings=_embeddings(N_DOCS, 1)), DenseRetriever(new, embeddings=_embeddings(N_DOCS, 2))
    if kind == "feedback":
        return FeedbackRetriever(BM25Retriever(old), "rm3"), FeedbackRetriever(BM25Retriever(new, k1=1.2), "bo1")
    pair = CompositeRetriever([BM25Retriever(old), DenseRetriever(old, embeddings=_embeddings(N_DOCS, 1))])
    if kind == "composite":
        return pair, CompositeRetriever([BM25Retriever(new, k1=1.2), DenseRetriever(new, embeddings=_embeddings(N_DOCS, 2))],
                                        weights=[2.0, 1.0])
    return pair, None  # incremental: the new index is the old one changed after loading


def change(folder: Path) -> Any:
    """The incremental kind's new index: the folder's composite (memory-mapped) with documents
    added and deleted, pending: the save merges them (in each killed child, from the same
    pending state)."""
    ret = CompositeRetriever.load(folder)
    ret.add(_frame([f"n{i}" for i in range(5)], seed=3), embeddings=_embeddings(5, 4))
    ret.delete(["d1", "d7", "d20"])
    return ret


def _sha(*arrays: Any) -> list[str]:
    return [f"{np.asarray(a).dtype}{np.shape(a)}:{hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}"
            for a in arrays]


def state(ret: Any) -> Any:
    """What an index holds, read from its attributes (not from what ``save`` writes)."""
    table = hashlib.sha256(repr(ret.table.frame.values.tolist()).encode()).hexdigest()
    if isinstance(ret, BM25Retriever):
        return ["bm25", ret.method, ret.k1, ret.b, ret.delta, ret.fields, ret.fusion_k, ret.tokenizer.to_config(),
                ret.vocab, _sha(ret.t_ptr, ret.t_docs, ret.t_w, ret.nonocc, ret.doc_len, ret.tf), ret.own_stats, table]
    if isinstance(ret, DenseRetriever):
        return ["dense", ret.metric, ret.fields, ret.fusion_k, _sha(ret.embeddings), table]
    if isinstance(ret, FeedbackRetriever):
        return ["feedback", ret.model, ret.fb_docs, ret.fb_terms, ret.original_weight, ret.max_df_ratio, state(ret.bm25)]
    return ["composite", ret.k, ret.strategy, ret.weights, ret.method, ret.norm, ret.depth,
            [state(c) for c in ret.retrievers]]


def describe(ret: Any) -> str:
    """A canonical description of a loaded index: what it holds and its answers to a batch."""
    vectors = np.random.default_rng(9).standard_normal((len(QUERIES), DIM)).astype(np.float32)
    batch = QueryBatch(texts=QUERIES, owner=np.arange(len(QUERIES)), n_queries=len(QUERIES), limit=5,
                       filters=[{}] * len(QUERIES), embeddings=vectors)
    frame = ret.retrieve_batch(batch)
    answers = [ret.table.ids[frame.doc].tolist(), frame.score.tolist(), frame.ptr.tolist()]
    return json.dumps({"state": state(ret), "answers": answers}, sort_keys=True, default=str)


def _wait(pid: int, deadline: float) -> int:
    """The exit code of child ``pid`` (negative: killed by that signal); killed at ``deadline``."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return 999


def _killed_save(kind: str, folder: Path, new: Any, step: int) -> int:
    pid = os.fork()
    if pid == 0:  # the child: save, and SIGKILL itself at step ``step``
        code = 1
        try:
            calls = [0]

            def hook(label: str) -> None:
                if calls[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
                calls[0] += 1

            _persist._step_hook = hook
            new.save(folder)  # incremental: pending changes, merged by this save
            code = 0
        finally:
            os._exit(code)
    return _wait(pid, 60.0)


def _labels(kind: str, scratch: Path, old_dir: Path, new: Any) -> list[str]:
    _clone(old_dir, scratch)
    labels: list[str] = []
    _persist._step_hook = labels.append
    try:
        (change(scratch) if kind == "incremental" else new).save(scratch)
    finally:
        _persist._step_hook = None
    return labels


def _leftovers(folder: Path) -> list[str]:
    body = json.loads((folder / "manifest.json").read_text())
    gen = body["generation"]
    return sorted(p.name for p in folder.iterdir() if p.name not in ("manifest.json", ".kolm-save.lock")
                  and f".{gen}." not in p.name)


def _clone(src: Path, dst: Path) -> None:
    """``dst`` holding hard links to the files of ``src`` (but its lock): a save never writes a
    file in place, so the links stay the old index's (were one written, the old index would
    change under its later copies and the test would see a mix)."""
    dst.mkdir()
    for p in src.iterdir():
        if p.name != ".kolm-save.lock":
            os.link(p, dst / p.name)


def run(work: Path, kind: str) -> list[dict[str, Any]]:
    old, new = build(kind)
    old.save(work / kind / "old")
    labels = _labels(kind, work / kind / "count", work / kind / "old", new)
    new_dir = work / kind / "count" if kind == "incremental" else work / kind / "new"
    if kind == "incremental":  # loaded from the old files (the step folders link to the same inodes)
        new = change(work / kind / "old")
    else:
        new.save(new_dir)
    load = LOADERS[kind]
    want = {"old": describe(load(work / kind / "old")), "new": describe(load(new_dir))}
    clean = load(new_dir)
    checked = {0, len(labels), labels.index("manifest written"),
               next(i for i, label in enumerate(labels) if label.startswith("create") and "documents." in label),
               next(i for i, label in enumerate(labels) if label.startswith("remove"))}
    records = []
    for step in range(len(labels) + 1):
        folder = work / kind / f"step{step}"
        _clone(work / kind / "old", folder)
        code = _killed_save(kind, folder, new, step)
        try:
            got = describe(load(folder))
            outcome = next((name for name, d in want.items() if d == got), "mixed")
        except Exception as exc:
            outcome = f"unloadable: {type(exc).__name__}: {exc}"
        label = labels[step] if step < len(labels) else "(not killed)"
        left = None
        if step in checked:
            clean.save(folder)  # a clean save afterwards removes what the killed one left
            left = _leftovers(folder)
        records.append({"kind": kind, "step": step, "label": label, "exit": code, "outcome": outcome,
                        "leftovers": left})
    return records


def main() -> None:
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    # fsync makes a save durable across a power cut, which a SIGKILL is not (the page cache
    # survives it): without it 134 saves take seconds, not a minute, and every step is the same
    os.fsync = lambda fd: None
    for kind in sys.argv[2:] or KINDS:
        for rec in run(work, kind):
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
