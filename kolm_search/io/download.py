"""Download BEIR datasets: checksum-verified, unpacked safely, cached, never half-written.

HTTP is httpx (a core dependency, imported on first download), with the retry policy the LLM
client uses (:class:`kolm_search._http.RetryPolicy`: a 429 or 5xx reply, or a timeout before
one, is tried again; ``Retry-After`` honoured up to its cap).

The registry (names, URLs, md5 checksums published by BEIR) is ``kolm_search/data/beir.json``.
A download streams to a temporary file, is verified, unpacked into a temporary folder with
every member checked to stay inside it (no ``..``, no absolute path, no symbolic link), and
only then moved into the cache in one rename. Any failure removes the temporary files and
raises :class:`~kolm_search.errors.DownloadError` naming the dataset, the URL or the file.

Concurrent callers (threads or processes) downloading one dataset into one cache take turns
on a file lock (``<cache>/.locks/beir-<name>.lock``, the ``filelock`` package): the first
fetches, the others wait for it (at most ``max_seconds``) and then reuse its result.
Temporaries left by a killed process are removed by the next holder of the lock.

Archive bombs are refused: the unpacked size is capped (``max_unpacked_bytes``, checked on
the sizes the archive declares and again on the bytes actually written), and so is the
compression ratio of every member above 16 MiB (:data:`MAX_MEMBER_RATIO`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

import filelock

from kolm_search._http import RetryPolicy, parse_retry_after
from kolm_search._params import real, seconds
from kolm_search.errors import DownloadError, KolmTypeError, KolmValueError

__all__ = ["beir_registry", "default_cache_dir", "download_beir"]

MAX_MEMBER_RATIO = 200
"""Largest unpacked/compressed ratio of an archive member over :data:`RATIO_FLOOR` bytes."""
RATIO_FLOOR = 16 << 20
MAX_MEMBERS = 100_000
_CHUNK = 1 << 20
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def default_cache_dir() -> Path:
    """``$KOLM_SEARCH_CACHE``, else the platform's user cache folder for kolm_search
    (``platformdirs.user_cache_dir``: ``~/.cache/kolm_search`` on Linux, ``~/Library/Caches/kolm_search``
    on macOS, ``%LOCALAPPDATA%\\kolm_search\\Cache`` on Windows)."""
    found = os.environ.get("KOLM_SEARCH_CACHE")
    if found:
        return Path(found)
    import platformdirs

    return Path(platformdirs.user_cache_dir("kolm_search", appauthor=False))


def beir_registry() -> dict[str, dict[str, str]]:
    """Name -> ``{"url", "md5", "folder"}`` for every downloadable BEIR dataset."""
    text = resources.files("kolm_search").joinpath("data/beir.json").read_text(encoding="utf-8")
    datasets: dict[str, dict[str, str]] = json.loads(text)["datasets"]
    return datasets


def download_beir(name: str, cache_dir: str | Path | None = None, *, registry: dict[str, dict[str, str]] | None = None,
                  timeout: float = 60.0, progress: bool = True, force: bool = False,
                  max_unpacked_bytes: int = 20 << 30, max_seconds: float = 3 * 3600.0,
                  retry: RetryPolicy | None = None) -> Path:
    """Fetch the BEIR dataset ``name`` into the cache and return its folder.

    Parameters
    ----------
    name : str
        A key of the registry (``scifact``, ``nfcorpus``, ``fiqa``, ``arguana``, ...).
    cache_dir : path, optional
        Default :func:`default_cache_dir`; datasets go to ``<cache>/beir/<name>``.
    registry : dict, optional
        Overrides the packaged registry (``{name: {"url", "md5", "folder"}}``; ``md5`` may be
        left out to skip the checksum).
    timeout : float, default 60
        Seconds per network operation (connect, each read).
    progress : bool
        Show a progress bar (tqdm).
    force : bool
        Download again even when cached.
    max_unpacked_bytes : int, default 20 GiB
        Largest download and largest unpacked archive (total of its members).
    max_seconds : float, default 3 hours
        Deadline for the whole fetch and unpack; also the longest wait for another caller
        that is downloading the same dataset into the same cache.
    retry : RetryPolicy, optional
        When a reply (429, 5xx) or a timeout before one is tried again, and the waits between
        (``Retry-After`` honoured up to its cap): the LLM client's policy, by default 3 retries
        from 0.5 s. A transfer cut after its headers is not retried.

    Raises
    ------
    KolmValueError
        Unknown or unsafe name, or a registry entry without a ``url``.
    DownloadError
        Network failure (HTTP status, refused, reset or cut connection, timeout), checksum
        mismatch, bad, unsafe or oversized archive, disk error, lock wait over the deadline.
        No partial dataset stays.
    """
    reg = registry if registry is not None else beir_registry()
    if not isinstance(name, str):
        raise KolmTypeError(f"name must be a str, got {type(name).__name__}")
    if name not in reg:
        raise KolmValueError(f"unknown BEIR dataset {name!r}; known: {sorted(reg)}")
    if not _NAME.match(name) or ".." in name:
        raise KolmValueError(f"BEIR dataset name {name!r} is not a plain folder name")
    entry = reg[name]
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        raise KolmValueError(f"registry entry {name!r} has no 'url' string: {entry!r}")
    timeout, max_seconds = seconds("timeout", timeout, none=False), seconds("max_seconds", max_seconds, none=False)
    real("max_unpacked_bytes", max_unpacked_bytes, low=0.0, closed="neither")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    beir_root = root / "beir"
    target = beir_root / name
    if _complete(target) and not force:
        return target
    lock_path = root / ".locks" / f"beir-{name}.lock"
    try:
        beir_root.mkdir(parents=True, exist_ok=True)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadError(f"cannot create the cache folders under {root}: {exc}") from exc
    lock = filelock.FileLock(str(lock_path), timeout=max_seconds)
    try:
        lock.acquire()
    except filelock.Timeout as exc:
        raise DownloadError(f"waited {max_seconds:g}s for another download of {name!r} into {beir_root} "
                            f"(lock {lock_path}); try again later") from exc
    except OSError as exc:
        raise DownloadError(f"cannot take the lock {lock_path} for {name!r}: {exc}") from exc
    try:
        if _complete(target) and not force:  # another caller finished it while we waited
            return target
        mine = re.compile(rf"\.{re.escape(name)}\.tmp-[0-9a-f]{{32}}\.(?:zip|unpack|old)")
        for stale in beir_root.glob(f".{name}.tmp-*"):  # left by a killed process
            if mine.fullmatch(stale.name):
                _remove(stale)
        return _fetch_and_install(name, entry, beir_root, target, timeout=timeout, progress=progress,
                                  cap=int(max_unpacked_bytes), deadline=time.monotonic() + max_seconds,
                                  retry=retry if retry is not None else RetryPolicy())
    finally:
        lock.release()


def _complete(target: Path) -> bool:
    return (target / ".complete").is_file()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fetch_and_install(name: str, entry: dict[str, str], beir_root: Path, target: Path, *, timeout: float,
                       progress: bool, cap: int, deadline: float, retry: RetryPolicy) -> Path:
    """Fetch, verify and unpack into temporaries, then rename into ``target`` (lock held)."""
    stem = f".{name}.tmp-{uuid.uuid4().hex}"
    tmp_zip, tmp_dir, old = (beir_root / f"{stem}.{kind}" for kind in ("zip", "unpack", "old"))
    try:
        md5 = _fetch(name, entry["url"], tmp_zip, timeout=timeout, progress=progress, cap=cap, deadline=deadline,
                     retry=retry)
        expected = entry.get("md5")
        if expected and md5 != expected:
            raise DownloadError(f"checksum mismatch for {name!r} from {entry['url']}: md5 {md5} != expected {expected}")
        _unpack(name, tmp_zip, tmp_dir, cap=cap, deadline=deadline)
        inner = tmp_dir / entry.get("folder", name)
        source = inner if inner.is_dir() else tmp_dir
        if not any(source.glob("corpus.jsonl*")):
            raise DownloadError(f"{name!r}: the archive from {entry['url']} holds no corpus.jsonl")
        try:
            (source / ".complete").write_text(md5, encoding="utf-8")
            if target.exists() or target.is_symlink():
                os.replace(target, old)
            os.replace(source, target)
        except OSError as exc:
            raise DownloadError(f"{name!r}: cannot move the unpacked dataset into {target}: {exc}") from exc
        return target
    finally:
        for path in (tmp_zip, tmp_dir, old):
            _remove(path)


def _fetch(name: str, url: str, dest: Path, *, timeout: float, progress: bool, cap: int, deadline: float,
           retry: RetryPolicy) -> str:
    """Stream ``url`` into ``dest`` (httpx); return its md5. A 429 or 5xx reply, or a timeout before
    the reply's headers, is tried again under ``retry``; a transfer cut after its headers is not
    (nothing was verified yet: a DownloadError at once). Every failure is a DownloadError."""
    import httpx

    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:
            for attempt in range(retry.max_retries + 1):
                try:
                    with client.stream("GET", url) as resp:
                        if resp.status_code == 200:
                            return _stream(httpx, name, url, resp, dest, progress=progress, cap=cap, deadline=deadline)
                        detail = f"HTTP {resp.status_code} {resp.reason_phrase}"
                        wait = retry.wait(attempt, parse_retry_after(resp.headers.get("Retry-After"))) \
                            if retry.retryable(resp.status_code) else None
                except httpx.TimeoutException as exc:  # no reply yet (the body's own errors are DownloadErrors)
                    detail, wait = f"{type(exc).__name__}: {exc}", retry.wait(attempt)
                if wait is None or time.monotonic() + wait > deadline:
                    raise DownloadError(f"downloading {name!r} from {url} failed after {attempt + 1} attempt(s): {detail}")
                time.sleep(wait)
    except DownloadError:
        raise
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError, ValueError) as exc:
        raise DownloadError(f"downloading {name!r} from {url} failed after 0 bytes: {type(exc).__name__}: {exc}") from exc
    raise AssertionError("unreachable: the last attempt returns or raises")


def _stream(httpx: Any, name: str, url: str, resp: Any, dest: Path, *, progress: bool, cap: int,
            deadline: float) -> str:
    """Write a 200 reply's body (as sent: no content decoding) into ``dest``; its md5. Every
    failure is a DownloadError naming the bytes received."""
    digest = hashlib.md5(usedforsecurity=False)
    length = (resp.headers.get("Content-Length") or "").strip()
    total = int(length) if length.isdigit() else 0
    if total > cap:
        raise DownloadError(f"{name!r}: {url} announces {total} bytes, more than max_unpacked_bytes={cap}")
    size = 0
    bar = _bar(total, name, progress)
    try:
        with _open_for_write(dest) as out:
            for chunk in resp.iter_raw():  # as it arrives (a chunk size would buffer up to it)
                size += len(chunk)
                if size > cap:
                    raise DownloadError(f"{name!r}: {url} sent more than max_unpacked_bytes={cap} bytes")
                if time.monotonic() > deadline:
                    raise DownloadError(f"{name!r}: downloading {url} took longer than max_seconds")
                _write(out, chunk, dest)
                digest.update(chunk)
                bar.update(len(chunk))
    except DownloadError:
        raise
    except (httpx.HTTPError, httpx.StreamError, OSError, ValueError) as exc:
        raise DownloadError(f"downloading {name!r} from {url} failed after {size} bytes: "
                            f"{type(exc).__name__}: {exc}") from exc
    finally:
        bar.close()
    if total and size != total:
        raise DownloadError(f"{name!r}: the download from {url} was cut: {size} of {total} bytes")
    hexdigest: str = digest.hexdigest()
    return hexdigest


def _open_for_write(path: Path) -> Any:
    try:
        return open(path, "xb")
    except OSError as exc:
        raise DownloadError(f"cannot create {path}: {exc}") from exc


def _write(out: Any, data: bytes, path: Path) -> None:
    try:
        out.write(data)
    except OSError as exc:
        raise DownloadError(f"writing {path} failed: {exc}") from exc


def _unpack(name: str, archive_path: Path, target: Path, *, cap: int, deadline: float) -> None:
    """Unpack the zip into ``target`` (created), refusing unsafe members and bombs."""
    try:
        with zipfile.ZipFile(archive_path) as archive:
            members = archive.infolist()
            _check_members(name, members, target.resolve(), cap)
            target.mkdir()
            written = 0
            for info in members:
                dest = target / info.filename
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, _open_for_write(dest) as out:
                    while chunk := src.read(_CHUNK):
                        written += len(chunk)
                        if written > cap:
                            raise DownloadError(f"{name!r}: the archive unpacks to more than "
                                                f"max_unpacked_bytes={cap} bytes")
                        _write(out, chunk, dest)
                if time.monotonic() > deadline:
                    raise DownloadError(f"{name!r}: unpacking took longer than max_seconds")
    except DownloadError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError) as exc:
        raise DownloadError(f"{name!r}: the download is not a valid zip archive ({archive_path.name}): "
                            f"{type(exc).__name__}: {exc}") from exc
    except OSError as exc:
        raise DownloadError(f"{name!r}: unpacking into {target} failed: {exc}") from exc


def _check_members(name: str, members: list[zipfile.ZipInfo], root: Path, cap: int) -> None:
    if len(members) > MAX_MEMBERS:
        raise DownloadError(f"{name!r}: the archive has {len(members)} members, more than {MAX_MEMBERS}")
    declared = sum(info.file_size for info in members)
    if declared > cap:
        raise DownloadError(f"{name!r}: the archive would unpack to {declared} bytes, more than "
                            f"max_unpacked_bytes={cap}")
    for info in members:
        dest = (root / info.filename).resolve()
        if root not in dest.parents and not (dest == root and info.is_dir()):
            raise DownloadError(f"{name!r}: archive member {info.filename!r} would escape the target folder")
        mode = info.external_attr >> 16
        if mode and (mode & 0o170000) == 0o120000:
            raise DownloadError(f"{name!r}: archive member {info.filename!r} is a symbolic link")
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_MEMBER_RATIO * max(info.compress_size, 1):
            raise DownloadError(f"{name!r}: archive member {info.filename!r} unpacks {info.file_size} bytes from "
                                f"{info.compress_size} (ratio over {MAX_MEMBER_RATIO}): refused as an archive bomb")


def _bar(total: int, name: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total or None, unit="B", unit_scale=True, desc=f"download {name}", disable=not enabled, leave=False)
