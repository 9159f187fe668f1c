"""Sharded indexes built by the workers of a Dask cluster, each from its part of the corpus files.

The client reads metadata only (file sizes, parquet footers); no document passes through it.
The steps of :func:`build_shards`:

0. **plan** (:mod:`kolm_search.io.corpus_parts`): the files cut into one part per shard, of about
   equal bytes, in corpus order; tasks count the lines of the gzip'd files that a cut falls in
   and the line starts of plain text pieces (each by the worker that reads it), so that every
   document keeps its file and line;
1. **read** (a task per shard, :func:`~kolm_search.retrievers.stream_count.count_corpus`): the
   part's documents checked and written to a documents file, and for BM25 tokenised, counted and
   spilled, in a spill folder inside the build folder, memory bounded by ``memory_limit``; the
   shard reports its size, its ids' 64-bit hashes and (BM25) its statistics;
2. **check** (client): ids unique over all shards (a hash collision is confirmed on the ids;
   a duplicate raises naming both files and lines); BM25 statistics merged exactly
   (:meth:`CollectionStats.merge`: integer sums), so every shard is weighted as the
   single-machine index of the same files is;
3. **write** (a task per shard): BM25 weighted with the merged statistics
   (:func:`~kolm_search.retrievers.stream_build.write_counted`), or a dense index over the
   shard's rows of a ``.npy`` file of vectors (or embedded on the worker) with its own ANN
   index; saved as the index folder ``build-<id>/shard-<i>``;
4. **switch** (client): the manifest naming every shard (:mod:`.sharded_store`) written all or
   nothing; older builds' folders and the spill folders removed.

A worker killed during a task: Dask runs the task again elsewhere (its inputs are files, so a
lost read is read again), up to ``distributed.scheduler.allowed-failures``. A task that fails
for good, bad input, or the deadline passing cancels the others, removes the build folder and
raises; the folder keeps the index it held. The path must be on storage that the client and
every worker see (any local folder on a ``LocalCluster``).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import filelock
import numpy as np

from kolm_search.distributed._wait import Deadline, cluster_workers, results
from kolm_search.distributed.sharded_store import ShardEntry, open_sharded
from kolm_search.errors import DistributedError, FrameValidationError, KolmError, KolmValueError
from kolm_search.io.corpus_parts import (
    Piece,
    corpus_files,
    gz_to_count,
    line_count,
    number_lines,
    pieces_to_count,
    plan_parts,
)
from kolm_search.retrievers.postings import CollectionStats
from kolm_search.retrievers.stream_build import default_memory_limit
from kolm_search.retrievers.stream_count import CountedCorpus, count_corpus

__all__ = ["ShardBuild", "build_shards", "shard_entries", "step", "write_shard"]

_step_hook: Callable[[str], None] | None = None  # tests: called on the workers at "read <i>", "write <i>", "score <i>"
_LOCK = ".kolm-build.lock"
_BUILD = re.compile(r"build-[0-9a-f]{32}")
_BYTES_PER_CHAR = 12  # as the single-machine build (kolm_search.retrievers.stream_build)


def step(label: str) -> None:
    """Call the test hook, if one is installed in this process."""
    if _step_hook is not None:
        _step_hook(label)


# -- tasks on the workers ------------------------------------------------------------------
def _line_starts(piece: Piece) -> int:
    return piece.line_starts()


def _read(pieces: Sequence[Piece], build: str, shard: int, tokenizer: Any, fields: Sequence[str],
          chunk_size: int | None, chunk_chars: int) -> CountedCorpus:
    root = Path(tempfile.mkdtemp(prefix=f"shard-{shard:03d}.spill-", dir=build))

    def chunks() -> Iterator[Any]:
        for n, chunk in enumerate(c for p in pieces for c in p.chunks(chunk_size, chunk_chars)):
            yield chunk
            if n == 0:
                step(f"read {shard}")

    return count_corpus(chunks(), root, tokenizer, fields, n_jobs=1, progress=False)


def _report(counted: CountedCorpus, with_stats: bool) -> tuple[int, np.ndarray, CollectionStats | None]:
    return counted.n_docs, counted.id_hashes(), counted.stats() if with_stats else None


def _identify(counted: CountedCorpus, rows: Sequence[int]) -> list[tuple[str, str]]:
    return [(i, counted.place(int(r))) for i, r in zip(counted.ids_at(rows), rows, strict=True)]


def _saved_generation(folder: Path) -> str:
    from kolm_search.retrievers._saved import read_json

    return str(read_json(folder / "manifest.json")["generation"])


def write_shard(counted: CountedCorpus, folder: str, shard: int, save: Callable[[CountedCorpus, Path], None]) -> tuple[int, str]:
    """Phase 3 of shard ``shard``: ``save(counted, folder)``; its size and save generation."""
    step(f"write {shard}")
    target = Path(folder)
    if not target.parent.is_dir():  # the build was abandoned (its folder removed)
        raise KolmError(f"{target.parent}: the build folder is gone")
    save(counted, target)
    return counted.n_docs, _saved_generation(target)


# -- the client ----------------------------------------------------------------------------
class ShardBuild:
    """One build's cluster, deadline and futures (cancelled if it fails)."""

    def __init__(self, dask_client: Any, deadline: Deadline) -> None:
        self.dc, self.deadline = dask_client, deadline
        self.workers = cluster_workers(dask_client, deadline)
        self.futures: list[Any] = []

    def submit(self, fn: Callable[..., Any], *args: Any, shard: int | None = None) -> Any:
        where = {} if shard is None else {"workers": [self.workers[shard % len(self.workers)]],
                                          "allow_other_workers": True}
        fut = self.dc.submit(fn, *args, pure=False, **where)
        self.futures.append(fut)
        return fut

    def wait(self, futures: Sequence[Any], names: Sequence[str]) -> list[Any]:
        return results(futures, names, self.deadline)

    def memory_limit(self) -> int:
        """A quarter of the smallest worker's Dask memory limit (else of the machine's share)."""
        limits = [int(w.get("memory_limit") or 0) for w in self.dc.scheduler_info()["workers"].values()]
        known = [x for x in limits if x > 0]
        return max(1 << 20, min(known) // 4) if known else default_memory_limit() // len(self.workers)

    def plan(self, source: Any, n_shards: int) -> list[list[Piece]]:
        files = corpus_files(source)
        gz = gz_to_count(files, n_shards)
        lines = dict(zip(gz, self.wait([self.submit(line_count, p) for p in gz], [f"count lines of {p}" for p in gz]),
                         strict=True))
        parts = plan_parts(files, n_shards, lines)
        todo = pieces_to_count(parts)
        counts = self.wait([self.submit(_line_starts, p, shard=k) for k, p in todo],
                           [f"count lines of {p.path} from byte {p.start}" for _, p in todo])
        return number_lines(parts, {(p.path, p.start): c for (_, p), c in zip(todo, counts, strict=True)})

    def check_unique(self, counted: Sequence[Any], hashes: Sequence[np.ndarray]) -> None:
        """Refuse an id found in two shards, naming both places (within a shard, its read did)."""
        if len(hashes) < 2:
            return
        h = np.concatenate(hashes)
        shard_of = np.repeat(np.arange(len(hashes)), [len(x) for x in hashes])
        starts = np.concatenate([[0], np.cumsum([len(x) for x in hashes])])
        order = np.argsort(h, kind="stable")
        same = np.flatnonzero((h[order][1:] == h[order][:-1]) & (shard_of[order][1:] != shard_of[order][:-1]))
        if not len(same):
            return
        rows = np.unique(np.concatenate([order[same], order[same + 1]]))
        asks = {int(s): rows[shard_of[rows] == s] - starts[s] for s in np.unique(shard_of[rows])}
        answers = self.wait([self.submit(_identify, counted[s], r) for s, r in asks.items()],
                            [f"shard {s} (duplicate check)" for s in asks])
        found = {int(r + starts[s]): a for (s, rs), ans in zip(asks.items(), answers, strict=True)
                 for r, a in zip(rs, ans, strict=True)}
        dups = [(int(a), int(b)) for a, b in zip(order[same], order[same + 1], strict=True)
                if found[int(a)][0] == found[int(b)][0]]
        if dups:
            first, second = min((min(p), max(p)) for p in dups)
            raise FrameValidationError(f"{found[second][1]}: duplicate document id {found[second][0]!r} "
                                       f"(first at {found[first][1]})")


def _remove_builds(root: Path, keep: set[str] | None) -> None:
    """Remove the build folders under ``root`` but those in ``keep`` (None: remove nothing)."""
    if keep is None:
        return
    for folder in root.glob("build-*"):
        if _BUILD.fullmatch(folder.name) and folder.is_dir() and folder.name not in keep:
            shutil.rmtree(folder, ignore_errors=True)


def _check_target(root: Path) -> None:
    """Refuse a folder that holds something else than an index (a build removes folders there)."""
    if not root.exists():
        return
    if not root.is_dir():
        raise KolmValueError(f"{root}: not a folder; a sharded index is a folder")
    if (root / "manifest.json").exists():
        return  # an index: saving over another program's manifest is refused (kolm_search.retrievers._persist)
    others = sorted(p.name for p in root.iterdir() if p.name not in (_LOCK, ".kolm-save.lock")
                    and not _BUILD.fullmatch(p.name))
    if others:
        raise KolmValueError(f"{root}: holds {others[0]!r} and no index; build into a new or empty folder")


def _named_builds(root: Path, kind: str) -> set[str] | None:
    """The build folders that the manifest in ``root`` names (older builds and those of clients
    that died are the others); None when a manifest is there but cannot be read: then no folder
    is known to be unused."""
    if not (root / "manifest.json").exists():
        return set()
    try:
        return {e.folder.split("/")[0] for e in open_sharded(root, kind).shards}
    except KolmValueError:
        return None


def build_shards(kind: str, source: Any, path: str | Path, n_shards: int, dask_client: Any, *, tokenizer: Any,
                 fields: Sequence[str], write: Callable[[ShardBuild, list[Any], list[tuple[Any, ...]], Path], Any],
                 chunk_size: int | None, memory_limit: int | None, timeout: float) -> Path:
    """Build a sharded index of ``kind`` (``"bm25"``: ``tokenizer`` counts the shards' postings;
    ``"dense"``: None) from the files of ``source`` into folder ``path``; ``write(build, counted,
    reports, folder)`` runs phases 3-4 (the shards' write tasks and the manifest).

    Raises
    ------
    FrameValidationError
        Bad input (a broken line, a duplicate id ...), naming the file and line or row group.
    DistributedError
        A task failed after Dask's retries (a worker killed too often), or ``timeout`` passed.
    KolmError
        Another build of ``path`` is running.
    """
    deadline = Deadline(timeout, f"the sharded build of {path}")
    root = Path(path).expanduser()
    _check_target(root)
    build = ShardBuild(dask_client, deadline)
    limit = memory_limit or build.memory_limit()
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(root / _LOCK))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout as exc:
        raise KolmError(f"{root}: another sharded build of this folder is running ({_LOCK} is held)") from exc
    folder = root / f"build-{uuid.uuid4().hex}"
    ok = False
    try:
        _remove_builds(root, _named_builds(root, kind))  # builds of clients that died
        folder.mkdir()
        parts = build.plan(source, n_shards)
        counted = [build.submit(_read, parts[i], str(folder), i, tokenizer, tuple(fields), chunk_size,
                                max(1, limit // _BYTES_PER_CHAR), shard=i) for i in range(n_shards)]
        reports = build.wait([build.submit(_report, c, tokenizer is not None) for c in counted],
                             [f"shard {i} (read)" for i in range(n_shards)])
        build.check_unique(counted, [r[1] for r in reports])
        write(build, counted, reports, folder)
        ok = True
    except BaseException:
        for f in build.futures:
            f.cancel()
        raise
    finally:
        if ok:
            for spill in folder.glob("shard-*.spill-*"):
                shutil.rmtree(spill, ignore_errors=True)
            _remove_builds(root, {folder.name})
        else:
            shutil.rmtree(folder, ignore_errors=True)
        lock.release()
        if created and not ok:
            with contextlib.suppress(OSError):
                (root / _LOCK).unlink()
                root.rmdir()
    return root


def shard_entries(folder: Path, written: Sequence[tuple[int, str]], reports: Sequence[tuple[Any, ...]]) -> list[ShardEntry]:
    """The manifest's entries of the shards written to ``folder``; a shard whose size differs
    from what its read reported is refused."""
    entries = []
    for i, ((n, generation), report) in enumerate(zip(written, reports, strict=True)):
        if n != report[0]:
            raise DistributedError(f"shard {i} was written with {n} documents but read {report[0]}")
        entries.append(ShardEntry(f"{folder.name}/shard-{i:03d}", int(n), generation))
    return entries

