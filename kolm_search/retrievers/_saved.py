"""Reading saved indexes: the files a manifest names, checked before numpy maps a byte.

Reading trusts no file: a missing or non-regular file, bytes that are not UTF-8 JSON, a
``.npy`` header whose shape and dtype do not account for exactly the bytes on disk, or an
array of the wrong kind or rank is a :class:`KolmValueError` naming the file, raised before
numpy maps a byte of data. What the values mean is checked by :mod:`._validate`.

:class:`SavedFiles` reads one index's files as its manifest names them (format versions with
a file map, written by :func:`kolm_search.retrievers._persist.save_index`): the name of each
must be its key's under the manifest's generation (``t_w.<generation>.npy``: never a path
elsewhere, never a file of another save), and its size and sha256 must equal the manifest's
before it is read. Files the manifest does not name are never read (an interrupted save
leaves some; the next save removes them). Hashing costs about a tenth of a load (0.22 s of
2.0-3.0 s for 300k documents and 9.5M postings, ``benchmarks/bench_index_load.py``), less
than the array checks that follow; the guarantee that a load never mixes two saves does not
rest on it but on the names, so a future cheaper mode may skip the digests and keep it.
Older format versions (fixed names such as ``t_w.npy``, no file map) still load; nothing in
them can be compared.

How much a load checks is its ``verify`` (:data:`VERIFY`): ``"full"`` reads every byte (the
digests above, every value of every array, the document table whole); ``"quick"`` checks
what no search can do without, reading nothing it will not use: sizes and headers but no
digests, the invariants of the arrays that kernels index with that cost time in the
vocabulary's size (pointers), each term's postings when a search first reads them
(:mod:`.postings_gate`; a reader of whole arrays checks them block by block, :mod:`._blocks`),
term frequencies when an update first needs them, and each record batch of the documents file
when a row of it is first read. ``"auto"`` (the loaders' default) is ``"full"`` for an index
of at most :data:`AUTO_FULL_BYTES` on disk and ``"quick"`` above, as Lucene checks a
segment's files in full on merges and only their structure on open. Names are checked in every mode, so a load
never mixes the files of two saves.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.lib.format as npy_format

from kolm_search._params import one_of
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.mapped_table import MappedDocumentTable, in_memory
from kolm_search.errors import KolmValueError

__all__ = ["AUTO_FULL_BYTES", "EXTENSIONS", "FILE_NAME", "SavedFiles", "VERIFY", "Verify", "check_manifest",
           "load_array", "load_table", "open_index", "read_json", "read_manifest", "retrying"]

Kind = Literal["int", "float"]
Verify = Literal["auto", "full", "quick"]
VERIFY = ("auto", "full", "quick")
AUTO_FULL_BYTES = 256 << 20  # verify="auto": indexes up to this size are checked in full
T = TypeVar("T")
_KINDS: dict[str, str] = {"int": "iu", "float": "f"}
EXTENSIONS = ("npy", "json", "arrow", "parquet")
KEY = r"[0-9A-Za-z_]+(?:\.[0-9A-Za-z_]+)*"
FILE_NAME = re.compile(rf"(?P<key>{KEY})\.(?P<gen>[0-9a-f]{{32}})\.(?P<ext>npy|json|arrow|parquet)")
_GENERATION = re.compile(r"[0-9a-f]{32}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_ATTEMPTS = 3  # loads restarted when a save replaced the index while it was read


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


def check_manifest(path: Path, body: Any, fmt: str, version: int | tuple[int, ...], keys: Collection[str],
                   optional: Collection[str] = ()) -> dict[str, Any]:
    """``body`` (a manifest, or a child's part of one) as a dict with the keys ``format``,
    ``version``, ``config`` (an object) and ``keys``, perhaps ``optional``, no other, of format
    ``fmt`` and version ``version`` (or one of several); errors name ``path``."""
    if not isinstance(body, dict):
        raise KolmValueError(f"{path}: must hold a JSON object, got {type(body).__name__}")
    known = ("format", "version", "config", *keys)
    for key in known:  # format and version first: they decide what the other keys are
        if key not in body:
            raise KolmValueError(f"{path}: key {key!r} is missing")
        if key == "format" and body["format"] != fmt:
            raise KolmValueError(f"{path}: key 'format' is {body['format']!r}, expected {fmt!r}")
        versions = (version,) if isinstance(version, int) else version
        if key == "version" and (type(body["version"]) is not int or body["version"] not in versions):
            shown = " and ".join(str(v) for v in versions)
            raise KolmValueError(f"{path}: key 'version' is {body['version']!r}; this kolm_search reads {shown}")
    unknown = sorted(set(body) - set(known) - set(optional))
    if unknown:
        raise KolmValueError(f"{path}: unknown key {unknown[0]!r}")
    if not isinstance(body["config"], dict):
        raise KolmValueError(f"{path}: key 'config' must be an object, got {body['config']!r}")
    return body


def read_manifest(root: Path, fmt: str, version: int | tuple[int, ...], keys: Collection[str],
                  optional: Collection[str] = ()) -> dict[str, Any]:
    """``root/manifest.json`` checked by :func:`check_manifest`."""
    path = root / "manifest.json"
    if not path.exists() and not path.is_symlink():
        raise KolmValueError(f"{str(root)!r} is not a saved index (no manifest.json)")
    return check_manifest(path, read_json(path), fmt, version, keys, optional)


def _file_entries(where: Path, value: Any, generation: str, prefix: str) -> dict[str, dict[str, Any]]:
    """Key ``files``: key -> {name, bytes, sha256}, each name the key's under ``generation``."""
    if not isinstance(value, dict):
        raise KolmValueError(f"{where}: key 'files' must be an object, got {type(value).__name__}")
    for key, entry in value.items():
        label = f"files.{key}"
        if not isinstance(entry, dict) or set(entry) != {"name", "bytes", "sha256"}:
            raise KolmValueError(f"{where}: key {label!r} must be an object of 'name', 'bytes' and 'sha256'")
        name, size, digest = entry["name"], entry["bytes"], entry["sha256"]
        match = FILE_NAME.fullmatch(name) if isinstance(name, str) else None
        if match is None or match["key"] != prefix + key or match["gen"] != generation:
            raise KolmValueError(f"{where}: key {label + '.name'!r} is {name!r}, not a file of this save "
                                 f"({prefix}{key}.{generation}.<npy|json|arrow|parquet>)")
        if type(size) is not int or size < 0:
            raise KolmValueError(f"{where}: key {label + '.bytes'!r} must be a size in bytes, got {size!r}")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise KolmValueError(f"{where}: key {label + '.sha256'!r} must be 64 hex digits, got {digest!r}")
    return value


class SavedFiles:
    """The files of one saved index, or of one child of a composite, as its manifest names them.

    Parameters
    ----------
    root : Path
        The index folder.
    where : Path
        What errors about the manifest name: ``root/manifest.json``, or for a child
        ``root/manifest.json#children[i]``.
    entries : dict or None
        The manifest's key ``files``; None for a format version without one (fixed names
        ``<key>.<ext>``, nothing to compare).
    generation : str or None
        The manifest's key ``generation`` (None with ``entries``).
    prefix : str
        Of every key of a child (``"0."``).
    full : bool
        Check in full (``verify="full"``: digests, every value), else quickly (see the module).
    """

    def __init__(self, root: Path, where: Path, entries: Any, generation: str | None, prefix: str = "",
                 full: bool = True) -> None:
        self.root, self.where, self.generation, self.prefix, self.full = root, where, generation, prefix, full
        self.entries = None if entries is None else _file_entries(where, entries, generation or "", prefix)
        self._checked: dict[str, Path] = {}

    @property
    def manifest_keys(self) -> tuple[str, ...]:
        """The keys a manifest (or child) has for its files: ``generation`` (top level) and ``files``."""
        if self.entries is None:
            return ()
        return ("files",) if self.prefix else ("generation", "files")

    def children(self, body: dict[str, Any], count: int | None = None) -> list[tuple[Any, SavedFiles]]:
        """Each child's part of the manifest ``body`` (key ``children``, a non-empty list, of
        ``count`` items if given) with its files, its keys prefixed ``"<i>."``."""
        value = body.get("children")
        if not isinstance(value, list) or not value or (count is not None and len(value) != count):
            what = "a non-empty list" if count is None else f"a list of {count}"
            raise KolmValueError(f"{self.where}: key 'children' must be {what} of indexes, got {str(value)[:80]}")
        out = []
        for i, child in enumerate(value):
            where = Path(f"{self.where}#children[{i}]")
            if not isinstance(child, dict) or "files" not in child:
                raise KolmValueError(f"{where}: key 'files' is missing")
            out.append((child, SavedFiles(self.root, where, child["files"], self.generation, f"{self.prefix}{i}.",
                                          self.full)))
        return out

    def expect(self, required: Collection[str], optional: Collection[str] = ()) -> None:
        """The manifest names exactly the files ``required``, perhaps ``optional``, no other."""
        if self.entries is None:
            return
        for key in required:
            if key not in self.entries:
                raise KolmValueError(f"{self.where}: key {'files.' + key!r} is missing")
        unknown = sorted(set(self.entries) - set(required) - set(optional))
        if unknown:
            raise KolmValueError(f"{self.where}: unknown key {'files.' + unknown[0]!r}")

    def has(self, key: str) -> bool:
        return self.entries is not None and key in self.entries

    def name(self, key: str, ext: str) -> str:
        """The file name of ``key`` (for messages; unchecked)."""
        entry = None if self.entries is None else self.entries.get(key)
        return f"{key}.{ext}" if entry is None else str(entry["name"])

    def path(self, key: str, ext: str) -> Path:
        """The checked file of ``key`` (size and, checked in full, sha256 as the manifest records
        them; once)."""
        if self.entries is None:
            return self.root / f"{key}.{ext}"
        if key in self._checked:
            return self._checked[key]
        entry = self.entries.get(key)
        if entry is None:
            raise KolmValueError(f"{self.where}: key {'files.' + key!r} is missing")
        path = self.root / entry["name"]
        if not entry["name"].endswith("." + ext):
            raise KolmValueError(f"{self.where}: key {'files.' + key + '.name'!r} is {entry['name']!r}, "
                                 f"expected a .{ext} file")
        size = _regular_size(path)
        if size != entry["bytes"]:
            raise KolmValueError(f"{path}: holds {size} bytes, manifest.json records {entry['bytes']} "
                                 "(damaged or replaced after the save)")
        if not self.full:
            self._checked[key] = path
            return path
        digest = hashlib.sha256()
        try:
            with path.open("rb") as fp:
                while block := fp.read(1 << 24):
                    digest.update(block)
        except OSError as exc:
            raise KolmValueError(f"{path}: cannot read: {exc}") from exc
        if digest.hexdigest() != entry["sha256"]:
            raise KolmValueError(f"{path}: content differs from the sha256 manifest.json records "
                                 "(damaged or changed after the save)")
        self._checked[key] = path
        return path

    def array(self, key: str, kind: Kind, ndim: int, *, mmap: bool) -> np.ndarray:
        return load_array(self.path(key, "npy"), kind, ndim, mmap=mmap)

    def json(self, key: str) -> Any:
        return read_json(self.path(key, "json"))

    def table(self, key: str, n_docs: int, *, mmap: bool) -> DocumentTable:
        """The document table of ``key``: a documents file (``.arrow``) memory-mapped (``mmap``;
        rows read and checked when first asked for) or read whole and checked; a parquet table
        (format versions before documents files) read whole."""
        entry = None if self.entries is None else self.entries.get(key)
        if entry is not None and str(entry["name"]).endswith(".arrow"):
            mapped = MappedDocumentTable(self.path(key, "arrow"), n_docs=n_docs)
            if not mmap:
                return in_memory(mapped)
            if self.full:
                mapped.check()
            return mapped
        return load_table(self.path(key, "parquet"), n_docs)


def open_index(root: Path, *, files_since: int, verify: Verify = "auto") -> tuple[Any, SavedFiles]:
    """The manifest of the index in ``root`` (unchecked: the loader of its format checks it with
    :func:`check_manifest` and :attr:`SavedFiles.manifest_keys`) and its files, to be checked as
    ``verify`` says (see the module).

    From version ``files_since`` a manifest names its files (keys ``generation`` and ``files``);
    older versions have fixed file names (always checked in full).
    """
    one_of("verify", verify, VERIFY)
    path = root / "manifest.json"
    if not path.exists() and not path.is_symlink():
        raise KolmValueError(f"{str(root)!r} is not a saved index (no manifest.json)")
    body = read_json(path)
    version = body.get("version") if isinstance(body, dict) else None
    if not (type(version) is int and version >= files_since):
        return body, SavedFiles(root, path, None, None)
    for key in ("generation", "files"):
        if key not in body:
            raise KolmValueError(f"{path}: key {key!r} is missing")
    if not isinstance(body["generation"], str) or not _GENERATION.fullmatch(body["generation"]):
        raise KolmValueError(f"{path}: key 'generation' must be 32 hex digits, got {body['generation']!r}")
    full = verify == "full" or (verify == "auto" and _recorded_bytes(body) <= AUTO_FULL_BYTES)
    return body, SavedFiles(root, path, body["files"], body["generation"], full=full)


def _recorded_bytes(body: Any) -> int:
    """The bytes of the files a manifest (and its children) records (what is not a size counts
    nothing: the checks that follow refuse it)."""
    total = 0
    if isinstance(body, dict):
        files = body.get("files")
        if isinstance(files, dict):
            total += sum(e["bytes"] for e in files.values()
                         if isinstance(e, dict) and type(e.get("bytes")) is int and e["bytes"] > 0)
        children = body.get("children")
        if isinstance(children, list):
            total += sum(_recorded_bytes(c) for c in children)
    return total


def _generation(root: Path) -> Any:
    try:
        body = read_json(root / "manifest.json")
    except KolmValueError:
        return None
    return body.get("generation") if isinstance(body, dict) else None


def retrying(root: Path, load: Callable[[], T]) -> T:
    """``load()``; started again (three times at most) when it failed while a save replaced the
    index in ``root`` (the manifest's generation changed meanwhile: the old files may be gone)."""
    for attempt in range(_ATTEMPTS):
        before = _generation(root)
        try:
            return load()
        except KolmValueError:
            if attempt == _ATTEMPTS - 1 or _generation(root) == before:
                raise
    raise AssertionError("unreachable")


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
