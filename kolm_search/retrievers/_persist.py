"""Index persistence without pickle: one ``.npy`` per array plus a JSON manifest."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kolm_search.errors import KolmValueError

__all__ = ["load_arrays", "read_manifest", "save_arrays", "write_manifest"]


def save_arrays(root: Path, arrays: Mapping[str, np.ndarray]) -> None:
    for name, arr in arrays.items():
        np.save(root / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)


def load_arrays(root: Path, names: Iterable[str], *, mmap: bool) -> dict[str, np.ndarray]:
    out = {}
    for name in names:
        path = root / f"{name}.npy"
        try:
            out[name] = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise KolmValueError(f"index {str(root)!r}: cannot read {path.name}: {exc}") from exc
    return out


def write_manifest(root: Path, fmt: str, version: int, config: Mapping[str, Any], **extra: Any) -> None:
    body = {"format": fmt, "version": version, "config": dict(config), **extra}
    (root / "manifest.json").write_text(json.dumps(body, indent=2), encoding="utf-8")


def read_manifest(root: Path, fmt: str, version: int) -> dict[str, Any]:
    path = root / "manifest.json"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise KolmValueError(f"{str(root)!r} is not a saved index (no manifest.json)") from exc
    except (OSError, ValueError) as exc:
        raise KolmValueError(f"index {str(root)!r}: corrupt manifest.json: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != fmt:
        raise KolmValueError(f"index {str(root)!r} holds format {body.get('format') if isinstance(body, dict) else body!r}, expected {fmt!r}")
    if body.get("version") != version:
        raise KolmValueError(f"index {str(root)!r} has version {body.get('version')!r}; this kolm_search reads {version}")
    return body
