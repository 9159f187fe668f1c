"""Index persistence without pickle: one ``.npy`` per array plus JSON files, each written
atomically (temporary file, then rename) and read defensively.

Reading trusts no file: a missing or non-regular file, bytes that are not UTF-8 JSON, a
``.npy`` header whose shape and dtype do not account for exactly the bytes on disk, or an
array of the wrong kind or rank is a :class:`KolmValueError` naming the file, raised before
numpy maps a byte of data. What the values mean is checked by :mod:`._validate`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.lib.format as npy_format

from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmValueError

__all__ = ["load_array", "load_table", "read_json", "read_manifest", "replacing", "save_arrays", "save_json",
           "save_table", "write_manifest"]

Kind = Literal["int", "float"]
_KINDS: dict[str, str] = {"int": "iu", "float": "f"}


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write; on success it replaces ``path`` atomically.

    Readers never see a half-written file, and a process that memory-mapped the old file
    keeps reading it intact (overwriting a mapped file in place could shrink it under the
    mapping: SIGBUS).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_arrays(root: Path, arrays: Mapping[str, np.ndarray]) -> None:
    for name, arr in arrays.items():
        with replacing(root / f"{name}.npy") as tmp, tmp.open("wb") as fp:
            np.save(fp, np.ascontiguousarray(arr), allow_pickle=False)


def save_json(path: Path, value: Any, **kwargs: Any) -> None:
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(value, **kwargs), encoding="utf-8")


def save_table(table: DocumentTable, path: Path) -> None:
    with replacing(path) as tmp:
        table.save(tmp)


def write_manifest(root: Path, fmt: str, version: int, config: Mapping[str, Any], **extra: Any) -> None:
    """Written last by every ``save``: a reader sees the old manifest until every array is in place."""
    save_json(root / "manifest.json", {"format": fmt, "version": version, "config": dict(config), **extra}, indent=2)


def _regular_size(path: Path) -> int:
    """Size of ``path`` in bytes; a missing file or a non-file (directory, FIFO, device) is an error."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise KolmValueError(f"{path}: file missing") from exc
    except OSError as exc:
        raise KolmValueError(f"{path}: cannot read: {exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise KolmValueError(f"{path}: not a regular file")
    return int(st.st_size)


def read_json(path: Path) -> Any:
    """The JSON value in ``path`` (UTF-8); every failure names the file."""
    _regular_size(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KolmValueError(f"{path}: cannot read: {exc}") from exc
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise KolmValueError(f"{path}: invalid JSON: {exc}") from exc


def read_manifest(root: Path, fmt: str, version: int | tuple[int, ...], keys: Collection[str],
                  optional: Collection[str] = ()) -> dict[str, Any]:
    """``root/manifest.json`` as a dict with the keys ``format``, ``version``, ``config`` (an
    object) and ``keys``, perhaps ``optional``, no other, of format ``fmt`` and version
    ``version`` (or one of several)."""
    path = root / "manifest.json"
    if not path.exists() and not path.is_symlink():
        raise KolmValueError(f"{str(root)!r} is not a saved index (no manifest.json)")
    body = read_json(path)
    if not isinstance(body, dict):
        raise KolmValueError(f"{path}: must hold a JSON object, got {type(body).__name__}")
    known = ("format", "version", "config", *keys)
    for key in known:
        if key not in body:
            raise KolmValueError(f"{path}: key {key!r} is missing")
    unknown = sorted(set(body) - set(known) - set(optional))
    if unknown:
        raise KolmValueError(f"{path}: unknown key {unknown[0]!r}")
    if body["format"] != fmt:
        raise KolmValueError(f"{path}: key 'format' is {body['format']!r}, expected {fmt!r}")
    versions = (version,) if isinstance(version, int) else version
    if type(body["version"]) is not int or body["version"] not in versions:
        shown = " and ".join(str(v) for v in versions)
        raise KolmValueError(f"{path}: key 'version' is {body['version']!r}; this kolm_search reads {shown}")
    if not isinstance(body["config"], dict):
        raise KolmValueError(f"{path}: key 'config' must be an object, got {body['config']!r}")
    return body


def load_array(path: Path, kind: Kind, ndim: int, *, mmap: bool) -> np.ndarray:
    """A ``.npy`` array of dtype kind ``kind`` and rank ``ndim``, checked before it is read.

    Parameters
    ----------
    path : Path
    kind : {"int", "float"}
        Any signed or unsigned integer dtype, or any real floating dtype (never object,
        bool, complex or structured; no pickle is ever loaded).
    ndim : int
    mmap : bool
        Memory-map (read-only) rather than read into memory.
    """
    size = _regular_size(path)
    try:
        with path.open("rb") as fp:
            major, _ = npy_format.read_magic(fp)
            if major == 1:
                shape, _, dtype = npy_format.read_array_header_1_0(fp)
            elif major == 2:
                shape, _, dtype = npy_format.read_array_header_2_0(fp)
            else:
                raise ValueError(f"unsupported .npy format version {major}")
            offset = fp.tell()
    except Exception as exc:  # numpy's header parser raises ValueError, EOFError, SyntaxError ...
        raise KolmValueError(f"{path}: not a readable .npy file: {exc}") from exc
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in _KINDS[kind]:
        raise KolmValueError(f"{path}: dtype {dtype} is not a plain {kind} dtype")
    if len(shape) != ndim or any(s < 0 for s in shape):
        raise KolmValueError(f"{path}: expected a {ndim}-d array, got shape {shape}")
    want = math.prod(shape) * dtype.itemsize
    if size - offset != want:
        raise KolmValueError(f"{path}: header declares {dtype} {shape} ({want} bytes) "
                             f"but the file holds {size - offset} data bytes")
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as exc:
        raise KolmValueError(f"{path}: cannot read: {exc}") from exc
    if arr.shape != shape or arr.dtype != dtype:  # the file changed under us
        raise KolmValueError(f"{path}: changed while being read")
    return arr


def load_table(path: Path, n_docs: int) -> DocumentTable:
    """The document table of an index; it must hold ``n_docs`` rows."""
    _regular_size(path)
    try:
        table = DocumentTable.load(path)
    except Exception as exc:  # pyarrow, JSON and table-schema errors alike
        detail = str(exc) if isinstance(exc, KolmValueError) else f"{type(exc).__name__}: {exc}"
        raise KolmValueError(f"{path}: invalid document table: {detail.replace(' ' + repr(str(path)), '')}") from exc
    if len(table) != n_docs:
        raise KolmValueError(f"{path}: holds {len(table)} documents; manifest.json key 'n_docs' says {n_docs}")
    return table
