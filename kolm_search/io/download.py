"""Download BEIR datasets: checksum-verified, unpacked safely, cached, never half-written.

The registry (names, URLs, md5 checksums published by BEIR) is ``kolm_search/data/beir.json``.
A download streams to a temporary file, is verified, unpacked into a temporary folder with
every member checked to stay inside it, and only then moved into the cache in one rename.
Any failure removes the temporary files and raises :class:`~kolm_search.errors.DownloadError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

from kolm_search.errors import DownloadError, KolmValueError

__all__ = ["beir_registry", "default_cache_dir", "download_beir"]


def default_cache_dir() -> Path:
    """``$KOLM_SEARCH_CACHE``, else ``~/.cache/kolm_search``."""
    return Path(os.environ.get("KOLM_SEARCH_CACHE", Path.home() / ".cache" / "kolm_search"))


def beir_registry() -> dict[str, dict[str, str]]:
    """Name -> ``{"url", "md5", "folder"}`` for every downloadable BEIR dataset."""
    text = resources.files("kolm_search").joinpath("data/beir.json").read_text(encoding="utf-8")
    datasets: dict[str, dict[str, str]] = json.loads(text)["datasets"]
    return datasets


def _safe_extract(archive: zipfile.ZipFile, target: Path) -> None:
    root = target.resolve()
    for info in archive.infolist():
        dest = (root / info.filename).resolve()
        if dest != root and root not in dest.parents:
            raise DownloadError(f"archive member {info.filename!r} would escape the target folder")
        mode = info.external_attr >> 16
        if mode and (mode & 0o170000) == 0o120000:
            raise DownloadError(f"archive member {info.filename!r} is a symbolic link")
    archive.extractall(root)


def download_beir(name: str, cache_dir: str | Path | None = None, *, registry: dict[str, dict[str, str]] | None = None,
                  timeout: float = 60.0, progress: bool = True, force: bool = False) -> Path:
    """Fetch the BEIR dataset ``name`` into the cache and return its folder.

    Parameters
    ----------
    name : str
        A key of the registry (``scifact``, ``nfcorpus``, ``fiqa``, ``arguana``, ...).
    cache_dir : path, optional
        Default :func:`default_cache_dir`; datasets go to ``<cache>/beir/<name>``.
    registry : dict, optional
        Overrides the packaged registry (``{name: {"url", "md5", "folder"}}``).
    timeout : float
        Seconds per network operation.
    progress : bool
        Show a progress bar (tqdm).
    force : bool
        Download again even when cached.

    Raises
    ------
    KolmValueError
        Unknown name.
    DownloadError
        Network failure, checksum mismatch, bad or unsafe archive. No partial dataset stays.
    """
    reg = registry if registry is not None else beir_registry()
    if name not in reg:
        raise KolmValueError(f"unknown BEIR dataset {name!r}; known: {sorted(reg)}")
    entry = reg[name]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    beir_root = root / "beir"
    target = beir_root / name
    if (target / ".complete").exists() and not force:
        return target
    beir_root.mkdir(parents=True, exist_ok=True)
    fd, tmp_zip_name = tempfile.mkstemp(prefix=f".{name}-", suffix=".zip.part", dir=beir_root)
    tmp_zip = Path(tmp_zip_name)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{name}-", suffix=".unpack", dir=beir_root))
    try:
        digest = hashlib.md5(usedforsecurity=False)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(entry["url"], timeout=timeout) as resp:
                total = int(resp.headers.get("Content-Length") or 0)
                bar = _bar(total, name, progress)
                while True:
                    chunk = resp.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
                bar.close()
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise DownloadError(f"downloading {name!r} from {entry['url']} failed: {exc}") from exc
        if digest.hexdigest() != entry["md5"]:
            raise DownloadError(f"checksum mismatch for {name!r}: md5 {digest.hexdigest()} != expected {entry['md5']}")
        try:
            with zipfile.ZipFile(tmp_zip) as archive:
                _safe_extract(archive, tmp_dir)
        except zipfile.BadZipFile as exc:
            raise DownloadError(f"{name!r}: the download is not a valid zip archive: {exc}") from exc
        inner = tmp_dir / entry.get("folder", name)
        source = inner if inner.is_dir() else tmp_dir
        if not any(source.glob("corpus.jsonl*")):
            raise DownloadError(f"{name!r}: the archive holds no corpus.jsonl")
        (source / ".complete").write_text(entry["md5"], encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(source, target)
        return target
    finally:
        tmp_zip.unlink(missing_ok=True)
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _bar(total: int, name: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total or None, unit="B", unit_scale=True, desc=f"download {name}", disable=not enabled, leave=False)
