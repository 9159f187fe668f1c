"""Building blocks of the adapters' ``fingerprint()`` (:class:`~kolm_search.contract.ports.Fingerprinted`):
a readable description of a configuration, and digests of model files and weights.

A fingerprint reads ``Name(param=value, ..., weights=sha256:1a2b...)``: readable in a job's
manifest and in the error that names what differs, exact where it matters (a digest of the
bytes). File digests are computed once per process for each (path, size, modification time).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["array_digest", "describe", "file_digest", "folder_digest", "text_digest", "torch_digest"]


def describe(name: str, **params: Any) -> str:
    """``name(k=v, ...)`` in the given order, each value as ``repr`` (strings of nested fingerprints
    included as they are)."""
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in params.items()) + ")"


def text_digest(text: str, size: int = 16) -> str:
    """``sha256:<hex>`` of ``text`` (UTF-8), shortened to ``size`` hex digits."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes (once per process while the file is unchanged)."""
    st = os.stat(path)
    return "sha256:" + _file_digest(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def folder_digest(path: str | Path) -> str:
    """``sha256:<hex>`` over every regular file under ``path``: relative names and contents."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    listing = [(p.relative_to(root).as_posix(), file_digest(p)) for p in files]
    return "sha256:" + hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def array_digest(*arrays: Any) -> str:
    """``sha256:<hex>`` over arrays' dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for arr in arrays:
        a = np.ascontiguousarray(arr)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return "sha256:" + digest.hexdigest()


def torch_digest(module: Any) -> str:
    """``sha256:<hex>`` over a torch module's ``state_dict`` (names, dtypes, shapes, values)."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(-1).view(dtype=_byte_dtype()).numpy().tobytes() if t.numel() else b"")
    return "sha256:" + digest.hexdigest()


def _byte_dtype() -> Any:
    import torch

    return torch.uint8
