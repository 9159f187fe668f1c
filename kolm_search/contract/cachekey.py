"""Content-addressed cache keys: a canonical, type-preserving encoding of request values.

:func:`canonical_digest` feeds a value to SHA-256 as a self-delimiting stream of tagged,
length-prefixed chunks, so two values get one digest exactly when they are equal *with
their types*: ``1``, ``"1"``, ``1.0``, ``True``, ``b"1"`` and ``np.int64(1)`` all differ, a
tuple is not a list, dict keys of mixed types are fine (they are sorted by their encoding,
not compared), and a numpy array is keyed by its dtype, shape and every byte of its data
(never by ``repr``, which elides the middle of large arrays).

Supported values: ``None``, ``bool``, ``int`` (any size), ``float`` (all NaNs alike,
``-0.0`` distinct from ``0.0``), ``complex``, ``str`` (lone surrogates included), ``bytes``,
``bytearray``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict`` (also ``OrderedDict``,
``defaultdict``, ``MappingProxyType``), enum members, numpy arrays and scalars,
``datetime``/``date``/``time``/``timedelta`` (time zones ``None``, ``timezone`` or
``ZoneInfo``), ``Decimal``, ``UUID`` and pure paths. Anything else (an arbitrary object,
whose ``repr`` may hold a memory address; a subclass of a builtin, which may carry state
its value does not show; a cycle; nesting deeper than :data:`MAX_DEPTH`) raises
a ``KolmTypeError`` (see :func:`not_cacheable`): the caller must not cache such a request rather than share a key.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import hashlib
import math
import pathlib
import struct
import types
import uuid
import zoneinfo
from collections import OrderedDict, defaultdict
from typing import Any

import numpy as np

from kolm_search.errors import KolmTypeError

__all__ = ["MAX_DEPTH", "canonical_digest", "not_cacheable", "request_key"]

MAX_DEPTH = 100
KEY_PREFIX = "kolm-search:v2:"
_NAN = struct.pack("<d", math.nan)
_MAPPINGS = (dict, OrderedDict, defaultdict, types.MappingProxyType)
_PATHS = (pathlib.PurePath, pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.Path, pathlib.PosixPath,
          pathlib.WindowsPath)  # the standard library's own: a subclass elsewhere may mean more


def not_cacheable(path: str, value: Any, why: str = "has no faithful content encoding") -> KolmTypeError:
    """The error for a value that cannot be keyed: names where it is and its type."""
    return KolmTypeError(f"{path or '<value>'}: {type(value).__module__}.{type(value).__qualname__} {why}")


def _frame(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(8, "little") + payload


def _int(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)


def _float(x: float) -> bytes:
    return _NAN if math.isnan(x) else struct.pack("<d", x)


def _tz(tz: dt.tzinfo | None, path: str, value: Any) -> bytes:
    if tz is None:
        return b"-"
    if type(tz) is dt.timezone:
        off = tz.utcoffset(None)
        return b"o" + _int(off.days * 86400 + off.seconds) + _int(off.microseconds)
    if type(tz) is zoneinfo.ZoneInfo and isinstance(tz.key, str):
        return b"z" + tz.key.encode("utf-8", "surrogatepass")
    raise not_cacheable(path, value, f"has a time zone of type {type(tz).__name__} that cannot be keyed")


class _Encoder:
    def __init__(self) -> None:
        self.active: set[int] = set()

    def encode(self, value: Any, out: list[bytes | memoryview], path: str, depth: int) -> None:
        t = type(value)
        if value is None:
            out.append(b"N")
        elif t is bool:
            out.append(b"T" if value else b"F")
        elif t is int:
            out.append(_frame(b"i", _int(value)))
        elif t is float:
            out.append(b"f" + _float(value))
        elif t is complex:
            out.append(b"c" + _float(value.real) + _float(value.imag))
        elif t is str:
            out.append(_frame(b"s", value.encode("utf-8", "surrogatepass")))
        elif t is bytes or t is bytearray:
            out.append(_frame(b"b" if t is bytes else b"B", bytes(value)))
        elif isinstance(value, np.ndarray) or isinstance(value, np.generic):
            self.numpy(value, out, path, depth)
        elif isinstance(value, enum.Enum):
            out.append(_frame(b"e", f"{t.__module__}.{t.__qualname__}.{value.name}".encode("utf-8", "surrogatepass")))
            self.encode(value.value, out, f"{path}.value", depth + 1)
        elif t in (dt.datetime, dt.time):
            tz = _tz(value.tzinfo, path, value)
            naive = value.replace(tzinfo=None).isoformat()
            out.append(_frame(b"D" if t is dt.datetime else b"H", f"{naive}|{value.fold}|".encode() + tz))
        elif t is dt.date:
            out.append(_frame(b"d", value.isoformat().encode()))
        elif t is dt.timedelta:
            out.append(_frame(b"r", _int(value.days) + b"|" + _int(value.seconds) + b"|" + _int(value.microseconds)))
        elif t is decimal.Decimal:
            out.append(_frame(b"m", str(value).encode()))
        elif t is uuid.UUID:
            out.append(b"u" + value.bytes)
        elif t in _PATHS:
            out.append(_frame(b"p", f"{t.__name__}:{value.as_posix()}".encode("utf-8", "surrogatepass")))
        elif t in (list, tuple, set, frozenset) or t in _MAPPINGS:
            self.container(value, out, path, depth)
        else:
            raise not_cacheable(path, value)

    def container(self, value: Any, out: list[bytes | memoryview], path: str, depth: int) -> None:
        if depth >= MAX_DEPTH:
            raise not_cacheable(path, value, f"is nested deeper than {MAX_DEPTH} levels")
        if id(value) in self.active:
            raise not_cacheable(path, value, "contains itself")
        self.active.add(id(value))
        try:
            t = type(value)
            if t is list or t is tuple:
                out.append((b"l" if t is list else b"t") + len(value).to_bytes(8, "little"))
                for i, item in enumerate(value):
                    self.encode(item, out, f"{path}[{i}]", depth + 1)
                return
            if t is set or t is frozenset:
                items = sorted(self.alone(item, f"{path}{{}}", depth + 1) for item in value)
                out.append((b"S" if t is set else b"Z") + len(items).to_bytes(8, "little"))
                out.extend(items)
                return
            pairs = []
            for k, v in value.items():
                pairs.append((self.alone(k, f"{path}{{key {k!r:.40}}}", depth + 1), v, k))
            pairs.sort(key=lambda p: p[0])
            out.append(b"M" + len(pairs).to_bytes(8, "little"))
            for kb, v, k in pairs:
                out.append(kb)
                self.encode(v, out, f"{path}[{k!r:.40}]", depth + 1)
        finally:
            self.active.discard(id(value))

    def alone(self, value: Any, path: str, depth: int) -> bytes:
        out: list[bytes | memoryview] = []
        self.encode(value, out, path, depth)
        return b"".join(out)

    def numpy(self, value: Any, out: list[bytes | memoryview], path: str, depth: int) -> None:
        arr = np.asarray(value)
        dtype = arr.dtype
        if dtype.byteorder not in ("=", "|"):
            arr = arr.astype(dtype.newbyteorder("="))
            dtype = arr.dtype
        tag = b"A" if isinstance(value, np.ndarray) else b"g"
        out.append(tag + len(arr.shape).to_bytes(8, "little") + b"".join(int(n).to_bytes(8, "little") for n in arr.shape))
        if dtype.hasobject:
            out.append(b"O")
            self.encode(arr.ravel().tolist(), out, path, depth + 1)
            return
        self.encode(dtype.descr if dtype.fields is not None else dtype.str, out, f"{path}.dtype", depth + 1)
        data = np.ascontiguousarray(arr).reshape(-1)
        out.append(data.nbytes.to_bytes(8, "little"))
        out.append(data.view(np.uint8).data if data.itemsize else b"")


def canonical_digest(value: Any) -> str:
    """SHA-256 hex digest of ``value``'s canonical encoding (see the module docstring).

    Raises
    ------
    KolmTypeError
        When ``value`` (or anything inside it) cannot be encoded faithfully.
    """
    out: list[bytes | memoryview] = []
    _Encoder().encode(value, out, "", 0)
    h = hashlib.sha256()
    for chunk in out:
        h.update(chunk)
    return h.hexdigest()


def request_key(normalized_query: Any, mode: Any, limit: Any, offset: Any, filters: Any, context: Any) -> str:
    """The response-cache key of a normalised request (``"kolm-search:v2:<sha256>"``).

    Raises
    ------
    KolmTypeError
        When a field (typically a ``filters`` or ``context`` value) cannot be encoded
        faithfully; such a request must not be cached.
    """
    fields = (("q", normalized_query), ("mode", mode), ("limit", limit), ("offset", offset),
              ("filters", filters), ("context", context))
    out: list[bytes | memoryview] = []
    enc = _Encoder()
    for name, value in fields:
        enc.encode(value, out, name, 0)
    h = hashlib.sha256()
    for chunk in out:
        h.update(chunk)
    return KEY_PREFIX + h.hexdigest()
