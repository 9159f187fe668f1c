"""Parts with a manifest: the output of a long job, each part written all or nothing.

A job folder holds ``manifest.json`` (what made it: the job's ``kind``, a fingerprint of
everything its output depends on, and how many parts it has) and its parts, each a parquet
file ``part-00000.parquet`` with a sidecar ``part-00000.json`` recording the file's sha256, its
row count, its schema and the job it belongs to. Every file is written to a temporary file in
the folder, flushed to disk (``fsync``) and renamed over its name (``os.replace``), the sidecar
after its part, so a process killed at any point leaves each part either complete and recorded,
or unrecorded (recomputed when the job is resumed), never half-written and trusted.

A job opening a folder:

- a new or empty folder: the manifest is written;
- a folder whose manifest records the same job: finished parts are kept (:meth:`PartsFolder.done`
  checks each against its sidecar; a damaged one is recomputed with a warning, never used);
- a folder of another job: :class:`~kolm_search.errors.JobMismatchError` naming what differs,
  unless ``restart=True``, which removes that job's parts (only files this module writes);
- a non-empty folder without a manifest: refused (it is not a job folder; nothing is deleted).

Other long jobs (experiments, index builds) can use the same folder type: it knows nothing of
runs. :func:`atomic_write` is the write step on its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search._logging import log
from kolm_search.errors import JobMismatchError, KolmValueError

__all__ = ["FORMAT", "MANIFEST", "PartsFolder", "atomic_write", "is_parts_folder"]

FORMAT = "kolm_search.parts/1"
MANIFEST = "manifest.json"
_PART = re.compile(r"part-(\d{5,})\.(parquet|json)")
_TMP = re.compile(r"\..+\.tmp-[0-9a-f]+")
_log = logging.getLogger("kolm_search.jobs")


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` all or nothing: a temporary sibling, fsync, rename, fsync of
    the folder (where the platform allows), so a reader or a crash sees the old file or the new."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not every platform can open a folder (Windows)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _job_id(kind: str, fingerprint: Mapping[str, str], n_parts: int) -> str:
    text = json.dumps({"kind": kind, "fingerprint": dict(fingerprint), "n_parts": n_parts}, sort_keys=True)
    return _digest(text.encode())


def is_parts_folder(path: str | Path) -> bool:
    """True when ``path`` is a folder holding a job manifest."""
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise KolmValueError(f"{what} {str(path)!r} cannot be read as JSON ({type(exc).__name__}: {exc})") from exc


def _manifest(path: Path) -> dict[str, Any]:
    """The manifest of folder ``path``, checked."""
    data = _read_json(path / MANIFEST, "job manifest")
    ok = (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("kind"), str)
          and isinstance(data.get("fingerprint"), dict) and all(isinstance(v, str) for v in data["fingerprint"].values())
          and isinstance(data.get("n_parts"), int) and not isinstance(data["n_parts"], bool) and data["n_parts"] >= 0)
    if not ok:
        raise KolmValueError(f"job manifest {str(path / MANIFEST)!r} is not a {FORMAT} manifest "
                             f"(format, kind, fingerprint, n_parts)")
    return data


class PartsFolder:
    """The folder of one job: its manifest, and parts ``0 .. n_parts - 1`` written atomically.

    Parameters
    ----------
    path : str or Path
        Created when missing.
    kind : str
        What the job is (``"rerank_run"``); recorded, and compared like the fingerprint.
    fingerprint : mapping str -> str
        Everything the output depends on (input digests, model fingerprint, parameters). A
        folder holding another fingerprint is refused, naming the keys that differ.
    n_parts : int
        How many parts the finished job has.
    restart : bool, default False
        Start over in a folder holding another job (its parts are removed) or the same one.

    Raises
    ------
    JobMismatchError
        The folder holds another job and ``restart`` is false.
    KolmValueError
        ``path`` is a file, a non-empty folder without a manifest, or holds an unreadable one.
    """

    def __init__(self, path: str | Path, *, kind: str, fingerprint: Mapping[str, str], n_parts: int,
                 restart: bool = False) -> None:
        self.path = Path(path)
        self.kind, self.fingerprint, self.n_parts = kind, {str(k): str(v) for k, v in fingerprint.items()}, int(n_parts)
        self.job = _job_id(kind, self.fingerprint, self.n_parts)
        if self.path.exists() and not self.path.is_dir():
            raise KolmValueError(f"job output {str(self.path)!r} is a file; give a folder (new or of this job)")
        self.path.mkdir(parents=True, exist_ok=True)
        if (self.path / MANIFEST).exists():
            self._check(_manifest(self.path), restart)
        else:
            strangers = [p.name for p in self.path.iterdir() if not (_PART.fullmatch(p.name) or _TMP.fullmatch(p.name)
                                                                       or p.name == ".lock")]
            if strangers:
                raise KolmValueError(f"job output {str(self.path)!r} holds {strangers[:3]} but no {MANIFEST}: "
                                     "it is not a job folder; give a new or empty folder")
            self._clear()
            self._write_manifest()

    def _check(self, found: dict[str, Any], restart: bool) -> None:
        recorded = {"kind": found["kind"], "n_parts": str(found["n_parts"]), **found["fingerprint"]}
        wanted = {"kind": self.kind, "n_parts": str(self.n_parts), **self.fingerprint}
        differs = {k: (recorded.get(k, "<absent>"), wanted.get(k, "<absent>"))
                   for k in dict.fromkeys([*recorded, *wanted]) if recorded.get(k) != wanted.get(k)}
        if restart:
            self._clear()
            self._write_manifest()
        elif differs:
            raise JobMismatchError(str(self.path), differs)

    def _write_manifest(self) -> None:
        body = {"format": FORMAT, "kind": self.kind, "fingerprint": self.fingerprint, "n_parts": self.n_parts,
                "job": self.job}
        atomic_write(self.path / MANIFEST, json.dumps(body, indent=2, sort_keys=True).encode())

    def _clear(self) -> None:
        """Remove the parts, sidecars and temporary files of whatever job wrote here (nothing else)."""
        for p in self.path.iterdir():
            if _PART.fullmatch(p.name) or _TMP.fullmatch(p.name):
                p.unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Held by the process running the job: a second one on the same folder fails at once.
        Taking it removes the temporary files of writers killed before (none can be alive)."""
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path / ".lock"), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise KolmValueError(f"job output {str(self.path)!r} is in use by another running job") from None
        try:
            for p in self.path.iterdir():
                if _TMP.fullmatch(p.name):
                    p.unlink(missing_ok=True)
            yield
        finally:
            lock.release()

    def part_path(self, i: int) -> Path:
        return self.path / f"part-{i:05d}.parquet"

    def _sidecar(self, i: int) -> Path:
        return self.path / f"part-{i:05d}.json"

    def _load(self, i: int) -> tuple[str | None, bytes, dict[str, Any]]:
        """``(why, data, record)`` of part ``i``: ``why`` is ``None`` when the part can be used,
        ``""`` when it was never finished, else what is wrong with it."""
        side = self._sidecar(i)
        if not side.exists():
            return "", b"", {}
        try:
            meta = _read_json(side, "part record")
            data = self.part_path(i).read_bytes()
        except (KolmValueError, OSError) as exc:
            return str(exc), b"", {}
        if not isinstance(meta, dict) or meta.get("job") != self.job or meta.get("part") != i:
            return f"its record {side.name} belongs to another job or part", b"", {}
        if meta.get("sha256") != _digest(data):
            return f"{self.part_path(i).name} does not match the sha256 recorded in {side.name}", b"", {}
        return None, data, meta

    def done(self) -> list[int]:
        """The parts finished and intact. A damaged one (a record without its file, a digest
        that does not match, a record of another job) is removed with a warning, so it is
        computed again; one never recorded (a write cut short) is simply not done."""
        finished = []
        for i in range(self.n_parts):
            why = self._load(i)[0]
            if why is None:
                finished.append(i)
            elif why:
                log(_log, "warning", f"job {str(self.path)!r}: part {i} is damaged ({why}); it is recomputed")
                self._sidecar(i).unlink(missing_ok=True)
                self.part_path(i).unlink(missing_ok=True)
        return finished

    def write(self, i: int, frame: pd.DataFrame) -> None:
        """Write part ``i`` (the file, then its record; each atomically)."""
        if not 0 <= i < self.n_parts:
            raise KolmValueError(f"part {i} is outside this job's {self.n_parts} parts")
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        data = buffer.getvalue()
        atomic_write(self.part_path(i), data)
        record = {"job": self.job, "part": i, "sha256": _digest(data), "rows": len(frame),
                  "columns": {str(c): str(t) for c, t in frame.dtypes.items()}}
        atomic_write(self._sidecar(i), json.dumps(record, sort_keys=True).encode())

    def read_part(self, i: int) -> pd.DataFrame:
        """Part ``i``, checked against its record (digest, rows, columns and dtypes)."""
        why, data, meta = self._load(i)
        if why is not None:
            state = "was never finished" if not why else f"is damaged ({why})"
            raise KolmValueError(f"job {str(self.path)!r}: part {i} {state}; run the job again to complete it")
        try:
            frame = pd.read_parquet(io.BytesIO(data))
        except Exception as exc:  # pyarrow raises many kinds for bytes that are not parquet
            raise KolmValueError(f"job {str(self.path)!r}: part {i} is not parquet ({type(exc).__name__}: {exc})") from exc
        columns = {str(c): str(t) for c, t in frame.dtypes.items()}
        if len(frame) != meta.get("rows") or columns != meta.get("columns"):
            raise KolmValueError(f"job {str(self.path)!r}: part {i} has {len(frame)} rows and columns {columns}, "
                                 f"its record says {meta.get('rows')} and {meta.get('columns')}")
        return frame

    def read(self) -> pd.DataFrame:
        """Every part, in order, as one frame (a job not finished is an error naming the parts)."""
        missing = [i for i in range(self.n_parts) if not self._sidecar(i).exists()]
        if missing:
            raise KolmValueError(f"job {str(self.path)!r} is not finished: {len(missing)} of {self.n_parts} parts "
                                 f"missing (e.g. part {missing[0]}); run the job again to complete it")
        frames = [self.read_part(i) for i in range(self.n_parts)]
        if not frames:
            return pd.DataFrame()
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    @classmethod
    def open_existing(cls, path: str | Path) -> PartsFolder:
        """The job folder ``path`` as its manifest records it (for reading)."""
        p = Path(path)
        found = _manifest(p)
        return cls(p, kind=found["kind"], fingerprint=found["fingerprint"], n_parts=found["n_parts"])
