"""Saving indexes all or nothing: new files beside the old ones, then one atomic switch.

Every persistable retriever describes what it writes as a :class:`Payload` (manifest keys,
arrays, JSON values, document tables, children), built and checked in memory; then
:func:`save_index` writes it. The folder holds::

    manifest.json                      {"format", "version", "generation", "config", ...,
                                        "files": {key: {"name", "bytes", "sha256"}},
                                        "children": [{"format", ..., "files": {...}}, ...]}
    <key>.<generation>.npy|json|arrow     (a documents file: kolm_search.engine.mapped_table)
    .kolm-save.lock                    one save at a time (filelock)

The steps of a save:

1. everything that can fail without the disk fails first: the payload (configuration, the
   tokenizer's round trip, arrays), its JSON encoded to bytes, the manifest's other keys;
2. under the folder's lock, every file is written under a new random generation id (never
   a name in use), flushed and fsync'd, then the folder;
3. the manifest naming them (sizes and sha256) is written to a temporary file, fsync'd and
   renamed over ``manifest.json`` (``os.replace``, atomic on POSIX): the switch; then the
   folder is fsync'd;
4. the files of earlier generations (and of interrupted saves) are removed; a process that
   memory-mapped them keeps them until it unmaps (unlinking never shrinks a mapped file).

Until the rename the folder's manifest is the old one, which names only old files, all
still there; after it the new one, whose files are all complete. A kill at any step
leaves the old index or the new one, never a mix, and never an index that cannot load; an
error before the switch removes the new files and re-raises. Files the manifest does not
name are never read (:mod:`._saved`). ``_step_hook`` (private, for tests) is called with a
label at each step, so a test can kill or fail the save there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

import filelock
import numpy as np
import numpy.lib.format as npy_format

from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.mapped_table import write_documents
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.retrievers._saved import FILE_NAME, KEY, read_json

__all__ = ["FileSource", "Payload", "save_index"]

_step_hook: Callable[[str], None] | None = None  # tests: called at every step of a save
_LOCK_NAME = ".kolm-save.lock"
_LOCK_SECONDS = 600.0  # waiting for another save of the same folder
_TMP = re.compile(r"\.manifest\.[0-9a-f]{32}\.tmp")
# files of the format versions before file maps (BM25 1-2, dense 1): removed after a save over them
_LEGACY = {"kolm-search/bm25": ("vocab.json", "documents.parquet", "t_ptr.npy", "t_docs.npy", "t_w.npy", "nonocc.npy",
                                "doc_len.npy", "tf.npy"),
           "kolm-search/dense": ("embeddings.npy", "documents.parquet")}
_KEY = re.compile(KEY)


@runtime_checkable
class FileSource(Protocol):
    """A file's bytes already on disk (an array spilled by a streaming build, a documents file
    written in chunks), copied into the index rather than held in memory."""

    def copy_to(self, fp: BinaryIO) -> None:
        """Write the whole file to ``fp``."""
        ...


@dataclass
class Payload:
    """What one index writes: its manifest keys and its files, all in memory.

    Attributes
    ----------
    format, version : str, int
        The manifest's ``format`` and ``version``.
    meta : dict
        The manifest's other keys (``config``, ``n_docs`` ...): JSON values.
    arrays : dict of str -> ndarray
        Written as ``.npy`` (no object dtype).
    blobs : dict of str -> JSON value
        Each written as its own ``.json`` file (a vocabulary).
    tables : dict of str -> DocumentTable
        Written as documents files (Arrow IPC, :func:`~kolm_search.engine.mapped_table.write_documents`:
        a loaded index maps them and reads the rows it returns).
    files : dict of str -> (str, FileSource)
        Files copied as they are: key -> (extension, source); a ``"npy"`` source must hold
        one array as :mod:`numpy.lib.format` writes it.
    children : list of Payload
        Child indexes (a composite's retrievers, a feedback retriever's BM25 index), stored in
        the manifest's ``children`` with keys prefixed ``"<i>."``.
    """

    format: str
    version: int
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    blobs: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, DocumentTable] = field(default_factory=dict)
    files: dict[str, tuple[str, FileSource]] = field(default_factory=dict)
    children: list[Payload] = field(default_factory=list)


def _step(label: str) -> None:
    if _step_hook is not None:
        _step_hook(label)


def _json_bytes(value: Any, what: str, indent: int | None = None) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise KolmValueError(f"{what} cannot be saved as JSON: {type(exc).__name__}: {exc}") from exc


@dataclass
class _File:
    key: str  # with its children's prefix
    ext: str
    value: Any  # ndarray, bytes (JSON), DocumentTable or FileSource
    entry: dict[str, Any] = field(default_factory=dict)  # name, bytes, sha256 once written


def _prepared(payload: Payload, prefix: str = "") -> tuple[dict[str, Any], list[_File]]:
    """The manifest body of ``payload`` (file entries filled in when written) and its files."""
    files: list[_File] = []
    body: dict[str, Any] = {"format": payload.format, "version": payload.version, **payload.meta}
    for name, arr in payload.arrays.items():
        a = np.ascontiguousarray(arr)
        if a.dtype.hasobject or a.dtype.fields is not None or a.dtype.kind not in "iuf":
            raise KolmTypeError(f"array {prefix + name!r} has dtype {a.dtype}; indexes save plain numbers")
        files.append(_File(prefix + name, "npy", a))
    files += [_File(prefix + name, "json", _json_bytes(v, f"{prefix + name}.json")) for name, v in payload.blobs.items()]
    files += [_File(prefix + name, "arrow", t) for name, t in payload.tables.items()]
    files += [_File(prefix + name, ext, source) for name, (ext, source) in payload.files.items()]
    for f in files:
        if not _KEY.fullmatch(f.key):
            raise KolmValueError(f"file key {f.key!r} must be letters, digits and '_' (dots between children)")
    own = list(files)
    if payload.children:
        body["children"] = []
        for i, child in enumerate(payload.children):
            child_body, child_files = _prepared(child, f"{prefix}{i}.")
            body["children"].append(child_body)
            files += child_files
    body["files"] = {f.key[len(prefix):]: f.entry for f in own}
    return body, files


class _Digesting:
    """A binary file that hashes and counts what is written to it."""

    def __init__(self, fp: BinaryIO) -> None:
        self.fp, self.sha, self.size = fp, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += memoryview(data).nbytes
        return self.fp.write(data)

    def flush(self) -> None:
        self.fp.flush()

    def tell(self) -> int:
        return self.size

    @property
    def closed(self) -> bool:
        return self.fp.closed


def _write(root: Path, f: _File, generation: str) -> None:
    name = f"{f.key}.{generation}.{f.ext}"
    with (root / name).open("xb") as fp:
        _step(f"create {name}")
        out = _Digesting(fp)
        if isinstance(f.value, FileSource):
            f.value.copy_to(out)  # type: ignore[arg-type]
        elif f.ext == "npy":
            npy_format.write_array(out, f.value, allow_pickle=False)
        elif f.ext == "json":
            out.write(f.value)
        else:
            write_documents(f.value, out)  # type: ignore[arg-type]
        fp.flush()
        os.fsync(fp.fileno())
    f.entry.update(name=name, bytes=out.size, sha256=out.sha.hexdigest())
    _step(f"wrote {name}")


def _sync_dir(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _old_manifest(root: Path) -> Any:
    """The folder's manifest before this save (None if absent or unreadable); a manifest that is
    not a kolm_search index's is refused: this save would destroy another program's folder."""
    path = root / "manifest.json"
    if not path.exists():
        return None
    try:
        body = read_json(path)  # a regular file only: a FIFO would block
    except KolmValueError:
        return None
    fmt = body.get("format") if isinstance(body, dict) else None
    if not (isinstance(fmt, str) and fmt.startswith("kolm-search/")):
        raise KolmValueError(f"{path} is not a kolm_search index's manifest; refusing to replace it "
                             "(save to an empty or new folder)")
    return body


def _stale(root: Path, generation: str, old: Any) -> Iterator[Path]:
    """Files of other generations, interrupted saves' temporary manifests, and the fixed-name
    files of a format version before file maps that ``old`` (the manifest replaced) was."""
    legacy = set(_LEGACY.get(str(old.get("format")), ())) if isinstance(old, dict) and "files" not in old else set()
    for p in sorted(root.iterdir()):
        m = FILE_NAME.fullmatch(p.name)
        if (m is not None and m["gen"] != generation) or _TMP.fullmatch(p.name) or p.name in legacy:
            yield p


def save_index(path: str | Path, payload: Payload) -> None:
    """Write ``payload`` to folder ``path``, replacing any index there all or nothing.

    Raises
    ------
    KolmValueError
        ``path`` is a file, or holds another program's ``manifest.json``; a value that is not JSON.
    KolmError
        The disk failed (full, read-only ...) before the switch: naming the file; the old index
        is intact and the new files are removed. Or another save held the folder's lock for
        10 minutes.
    """
    root = Path(path)
    body, files = _prepared(payload)  # step 1: nothing written yet
    _json_bytes(body, "the manifest")  # every child's keys too (the file entries are filled in later)
    if root.exists() and not root.is_dir():
        raise KolmValueError(f"{root}: not a folder; an index is saved to a folder")
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(root / _LOCK_NAME), timeout=_LOCK_SECONDS)
        lock.acquire()
    except filelock.Timeout as exc:
        raise KolmError(f"{root}: another save has held {_LOCK_NAME} for {_LOCK_SECONDS:g} s") from exc
    except OSError as exc:
        raise KolmError(f"{root}: cannot save here: {exc}") from exc
    try:
        _save_locked(root, body, files)
    except BaseException:
        lock.release()
        if created:  # a folder made by this save goes too, when it holds nothing but the lock file
            with contextlib.suppress(OSError):  # (the save's own error is the one to report)
                if [p.name for p in root.iterdir()] == [_LOCK_NAME]:
                    (root / _LOCK_NAME).unlink()
                    root.rmdir()
        raise
    lock.release()


def _save_locked(root: Path, body: dict[str, Any], files: list[_File]) -> None:
    old = _old_manifest(root)
    generation = uuid.uuid4().hex
    tmp = root / f".manifest.{generation}.tmp"
    current = root / "manifest.json"
    try:
        for f in files:  # step 2
            current = root / f"{f.key}.{generation}.{f.ext}"
            _write(root, f, generation)
        current = root
        _sync_dir(root)
        current = tmp  # step 3
        with tmp.open("xb") as fp:
            fp.write(_json_bytes({"format": body["format"], "version": body["version"], "generation": generation,
                                  **body}, "the manifest", indent=1))
            fp.flush()
            os.fsync(fp.fileno())
        _step("manifest written")
        os.replace(tmp, root / "manifest.json")
    except BaseException as exc:
        with contextlib.suppress(OSError):  # the new files go; the old manifest names none of them
            for f in files:
                (root / f"{f.key}.{generation}.{f.ext}").unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise KolmError(f"{current}: cannot save the index: {exc}; the folder keeps the index it held") from exc
        raise
    _step("switched")
    try:
        _sync_dir(root)
    except OSError as exc:
        raise KolmError(f"{root}: index saved, but the folder could not be synced to disk: {exc}") from exc
    _step("synced")
    for p in _stale(root, generation, old):  # step 4; a failure leaves files the next save removes
        _step(f"remove {p.name}")
        with contextlib.suppress(OSError):
            p.unlink()
    _step("done")
