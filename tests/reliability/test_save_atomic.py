"""Saves are all or nothing (issue 25, defect 1): a save over an index, killed or failing at any
step, leaves the old index or the new one, loadable, never a mix.

On the code before the fix a save renamed its files over the old ones one by one, so an
interrupted re-save loaded without error as ids of one index over the postings of the other
(the query "alpha" returned document "beta"), and ``save`` with ``tokenizer=str.split`` failed
only after replacing documents, arrays and vocabulary: both indexes lost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, CompositeRetriever, DenseRetriever, FeedbackRetriever, Tokenizer
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.retrievers import _persist
from tests.reliability.indexes import ROOT, as_legacy
from tests.reliability.save_child import KINDS, describe


def _docs(ids: list[str]) -> pd.DataFrame:
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    return pd.DataFrame({"id": ids, "content": [f"{words[i % 6]} {words[(i * 5) % 6]} shared" for i in range(len(ids))]})


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != ".kolm-save.lock"}


def test_save_killed_at_every_step_leaves_the_old_or_the_new_index(tmp_path: Path) -> None:
    """SIGKILL at every step of a save (BM25, dense, feedback, composite, a composite after
    add/delete), in forked children of one process (:mod:`tests.reliability.save_child`): the
    folder loads as exactly the old index up to the rename of the manifest and exactly the new
    one from it on, and the next save leaves nothing of the killed one."""
    groups = [["incremental", "dense", "bm25"], ["composite", "feedback"]]  # two processes: two cores
    procs = [subprocess.Popen([sys.executable, "-m", "tests.reliability.save_child", str(tmp_path / str(i)), *kinds],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i, kinds in enumerate(groups)]
    records = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, err[-3000:]
        records += [json.loads(line) for line in out.splitlines()]
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        by_kind[rec["kind"]].append(rec)
    assert sorted(by_kind) == sorted(KINDS)
    for kind, recs in by_kind.items():
        labels = [r["label"] for r in recs]
        switch = labels.index("switched")
        assert len(recs) >= 10 and labels[-1] == "(not killed)" and labels[switch - 1] == "manifest written", labels
        assert all(r["exit"] == -9 for r in recs[:-1]) and recs[-1]["exit"] == 0, recs
        assert [r["outcome"] for r in recs] == ["old"] * switch + ["new"] * (len(recs) - switch), (kind, recs)
        assert all(r["leftovers"] in (None, []) for r in recs) and sum(r["leftovers"] == [] for r in recs) >= 4, recs


def test_interrupted_renames_never_mix_two_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save whose k-th ``os.replace`` fails (k = 1 ...): the folder holds the old index or the new
    one. Before the fix the second rename failing left new documents over old postings."""
    old, new = BM25Retriever(_docs(["a", "b", "c", "d"])), BM25Retriever(_docs(["d", "c", "b", "a"]), k1=1.2)
    (tmp_path / "old").mkdir()
    old.save(tmp_path / "old")
    want = {"old": describe(BM25Retriever.load(tmp_path / "old"))}
    new.save(tmp_path / "new")
    want["new"] = describe(BM25Retriever.load(tmp_path / "new"))
    real = os.replace
    outcomes = []
    for k in range(1, 12):
        d = tmp_path / f"k{k}"
        shutil.copytree(tmp_path / "old", d)
        calls = [0]

        def failing(src: Any, dst: Any, k: int = k, calls: list[int] = calls) -> None:
            calls[0] += 1
            if calls[0] == k:
                raise OSError(28, "No space left on device")
            real(src, dst)

        monkeypatch.setattr(os, "replace", failing)
        try:
            new.save(d)
        except (OSError, KolmError):
            pass
        monkeypatch.setattr(os, "replace", real)
        got = describe(BM25Retriever.load(d))
        outcomes.append(next((name for name, w in want.items() if w == got), "mixed"))
    assert outcomes == ["old"] + ["new"] * 10


@pytest.mark.parametrize("tokenizer", [str.split, lambda text: text.split(), type("Plain", (Tokenizer,), {})()],
                         ids=["str.split", "lambda", "subclass"])
def test_a_tokenizer_that_cannot_be_restored_fails_before_anything_is_written(tmp_path: Path, tokenizer: Any) -> None:
    BM25Retriever(_docs(["a", "b", "c"])).save(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(KolmTypeError, match=r"tokenizer .* cannot be saved: a loaded index could not rebuild it"):
        BM25Retriever(_docs(["x", "y"]), tokenizer=tokenizer).save(tmp_path)
    assert _files(tmp_path) == before
    assert BM25Retriever.load(tmp_path).table.ids.tolist() == ["a", "b", "c"]


def test_every_error_of_a_save_leaves_the_old_index(tmp_path: Path) -> None:
    """Each failure a save can meet, before and while writing, leaves the old index loadable and
    the folder as it was (the new files removed)."""
    docs = _docs(["a", "b", "c"])
    BM25Retriever(docs).save(tmp_path / "i")
    before = _files(tmp_path / "i")

    class Opaque:  # a tokenizer no manifest can rebuild
        def __call__(self, text: str) -> list[str]:
            return text.split()

    class Remote:  # a retriever that is not an index
        name = "remote"

        def retrieve(self, context: Any) -> list[Any]:
            return []

    dense = DenseRetriever(docs, embeddings=np.eye(3, dtype=np.float32))
    failures: list[tuple[Any, type[Exception], str]] = [
        (CompositeRetriever([BM25Retriever(docs), Remote()]), KolmTypeError, r"retrievers\[1\] \(Remote\) cannot be saved"),
        (FeedbackRetriever(BM25Retriever(docs, tokenizer=Opaque())), KolmTypeError, "Opaque"),
        (CompositeRetriever([dense, CompositeRetriever([BM25Retriever(docs, tokenizer=Opaque())])]), KolmTypeError,
         "Opaque")]
    for ret, kind, what in failures:
        with pytest.raises(kind, match=what):
            ret.save(tmp_path / "i")
        assert _files(tmp_path / "i") == before

    labels: list[str] = []
    _persist._step_hook = labels.append
    try:
        BM25Retriever(docs, k1=1.1).save(tmp_path / "count")
    finally:
        _persist._step_hook = None
    for step in range(labels.index("switched")):  # a disk failing at each write, or an interrupt
        for exc in (OSError(28, "No space left on device"), KeyboardInterrupt()):
            calls = [0]

            def hook(at: str, step: int = step, exc: BaseException = exc, calls: list[int] = calls) -> None:
                calls[0] += 1
                if calls[0] == step + 1:
                    raise exc

            _persist._step_hook = hook
            try:
                with pytest.raises(KolmError if isinstance(exc, OSError) else KeyboardInterrupt) as info:
                    BM25Retriever(docs, k1=1.1).save(tmp_path / "i")
            finally:
                _persist._step_hook = None
            assert _files(tmp_path / "i") == before, labels[step]
            if isinstance(exc, OSError):
                assert "cannot save the index: [Errno 28] No space left on device; the folder keeps the index it held" \
                    in str(info.value)
    assert BM25Retriever.load(tmp_path / "i").k1 == 1.5


def test_a_folder_that_is_not_an_index_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(KolmValueError, match="not a folder"):
        BM25Retriever(_docs(["a"])).save(tmp_path / "file")
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"name": "a web app", "version": 3}))
    with pytest.raises(KolmValueError, match="is not a kolm_search index's manifest; refusing to replace it"):
        BM25Retriever(_docs(["a"])).save(other)
    assert sorted(p.name for p in other.iterdir()) == [".kolm-save.lock", "manifest.json"]


def test_a_save_waits_for_another_and_says_so_at_its_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import filelock

    BM25Retriever(_docs(["a"])).save(tmp_path)
    monkeypatch.setattr(_persist, "_LOCK_SECONDS", 0.2)
    with filelock.FileLock(str(tmp_path / ".kolm-save.lock")), \
            pytest.raises(KolmError, match=r"another save has held \.kolm-save\.lock for 0\.2 s"):
        BM25Retriever(_docs(["b"])).save(tmp_path)
    assert BM25Retriever.load(tmp_path).table.ids.tolist() == ["a"]


def test_old_removals_that_fail_leave_the_new_index_and_the_next_save_cleans_up(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    BM25Retriever(_docs(["a"])).save(tmp_path)
    real = Path.unlink
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (_ for _ in ()).throw(PermissionError(self)))
    BM25Retriever(_docs(["b"])).save(tmp_path)  # the switch happened: no error
    monkeypatch.setattr(Path, "unlink", real)
    assert BM25Retriever.load(tmp_path).table.ids.tolist() == ["b"]
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".npy"]) == 16  # the old generation's 8 arrays too
    BM25Retriever(_docs(["c"])).save(tmp_path)
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".npy"]) == 8


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_a_save_over_a_legacy_index_replaces_it_whole(tmp_path: Path, kind: str) -> None:
    """Format versions before file maps still load, and a save over one removes its fixed-name files."""
    docs = _docs(["a", "b", "c"])
    emb = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)  # save_child.describe queries 6-d
    ret = BM25Retriever(docs) if kind == "bm25" else DenseRetriever(docs, embeddings=emb)
    ret.save(tmp_path)
    as_legacy(tmp_path, 2 if kind == "bm25" else 1)
    cls = type(ret)
    assert describe(cls.load(tmp_path)) == describe(ret)
    assert (tmp_path / "documents.parquet").is_file()
    cls.load(tmp_path).save(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "documents.parquet" not in names and all(n in ("manifest.json", ".kolm-save.lock") or n.count(".") == 2
                                                    for n in names), names
    assert describe(cls.load(tmp_path)) == describe(ret)


def test_a_load_during_a_save_retries_and_gets_one_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save that switches and removes the old files while a load reads them: the load starts
    again on the new manifest (never a mix, never 'file missing')."""
    from kolm_search.retrievers import _saved

    BM25Retriever(_docs(["a", "b"])).save(tmp_path)
    real = _saved.SavedFiles.path
    done = [False]

    def racing(self: Any, key: str, ext: str) -> Path:
        if key == "t_w" and not done[0]:
            done[0] = True
            BM25Retriever(_docs(["c", "d", "e"])).save(tmp_path)  # switches and removes t_w of the old save
        return real(self, key, ext)

    monkeypatch.setattr(_saved.SavedFiles, "path", racing)
    assert BM25Retriever.load(tmp_path).table.ids.tolist() == ["c", "d", "e"]


def test_a_failed_first_save_removes_the_folder_it_made_and_keeps_one_that_was_there(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A save into a folder it made leaves nothing when it fails; a folder that was there before
    stays (empty), whatever the failure."""
    from kolm_search.retrievers import _persist
    from kolm_search.retrievers.bm25 import BM25Retriever

    index = BM25Retriever([{"id": "a", "content": "apple"}])

    def fail(label: str) -> None:
        if label == "manifest written":
            raise OSError("disk full")

    monkeypatch.setattr(_persist, "_step_hook", fail)
    with pytest.raises(Exception, match="disk full"):
        index.save(tmp_path / "new" / "ix")
    assert not (tmp_path / "new" / "ix").exists()
    (tmp_path / "there").mkdir()
    with pytest.raises(Exception, match="disk full"):
        index.save(tmp_path / "there")
    assert (tmp_path / "there").is_dir()
    assert [p.name for p in (tmp_path / "there").iterdir()] == [".kolm-save.lock"]
