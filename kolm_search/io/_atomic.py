"""Writes that replace a file all or nothing: a temporary file beside the target, renamed over it
when complete (removed otherwise), so a reader sees the old file or the new one, never a part.
Used by the run and qrels writers, the reports, the command line's ``-o`` and the caches.

The temporary file of a write to ``<name>`` is ``.<name>.<random>.<host>-<pid>.tmp<suffix>``:
``<random>`` eight of ``[a-z0-9_]`` (:func:`tempfile.mkstemp`'s), ``<host>`` the first eight hex
digits of the SHA-256 of the writer's host name and pid namespace, ``<pid>`` its process id,
``<suffix>`` the target's last suffix (``.parquet``; none when it has none). A process killed mid-write (SIGKILL)
leaves that file behind; :func:`sweep_leftovers` removes such files of a folder when their
writer is gone (the caches sweep their folders when opened, and a write sweeps the folder it
writes to, the first time in a process: a ``-o`` output's folder too).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["replacing", "sweep_leftovers", "write_text"]


def _host_tag() -> str:
    """The host part of a temporary file's name: a hash of the host name and, on Linux, of the
    process-id namespace (two containers of one host name number their processes apart)."""
    try:
        space = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        space = ""
    return hashlib.sha256(f"{socket.gethostname()}|{space}".encode("utf-8", "surrogatepass")).hexdigest()[:8]


_HOST = _host_tag()
#: a temporary file of :func:`replacing`; only names with a host and a pid are ever swept (a
#: name without them, as of an older version, could be a user's file in a ``cache_dir='.'``)
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.(?P<host>[0-9a-f]{8})-(?P<pid>[1-9][0-9]{0,9})"
                       r"\.tmp(?P<suffix>\.[^.]*)?", re.DOTALL)
#: a leftover whose writer cannot be told alive or not (another host's or pid namespace's) is
#: removed when it has not been written to for this long (seconds)
LEFTOVER_AGE = 24 * 3600.0
_swept: set[str] = set()


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, named as in the module doc), renamed over
    ``path`` when the block ends without error, removed otherwise. The folder's leftovers of
    killed writes are swept first (:func:`sweep_leftovers`: once per folder per process)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_leftovers(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                               suffix=f".{_HOST}-{os.getpid()}.tmp" + "".join(path.suffixes[-1:]))
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _writer_gone(pid: int, mtime: float) -> bool | None:
    """Whether this host's process ``pid``, which last wrote its file at ``mtime``, is gone: True
    when no process has that pid, or a zombie does, or one started more than
    :data:`LEFTOVER_AGE` after that write (the pid was reused; the margin is for a shared disk's
    clock that is not this host's); False when it runs, None when that cannot be told."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        pass
    except (OSError, OverflowError, ValueError):
        return None
    try:  # Linux: state and start time (clock ticks after boot) of the process holding the pid
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        started = boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False  # alive, no more known
    return stat[0] in "ZX" or started - mtime > LEFTOVER_AGE


def sweep_leftovers(folder: Path) -> list[Path]:
    """Remove the temporary files of :func:`replacing` that killed writes left in ``folder`` (not
    in its subfolders), once per folder per process; returns the files removed. A file is
    removed when its writer, a process of this host, is gone (see :func:`_writer_gone`), or,
    when that cannot be told (another host's or pid namespace's file), when it was last written
    to more than :data:`LEFTOVER_AGE` ago. Nothing but regular files named exactly as in the
    module doc is touched; a file that cannot be removed is left. Never raises ``OSError``."""
    removed: list[Path] = []
    try:
        key = os.path.abspath(folder)  # (no resolve(): a syscall per part, on every opening of a cache)
        if key in _swept:
            return removed
        _swept.add(key)
        entries = list(os.scandir(folder))
    except (OSError, RuntimeError):  # no folder, not readable, a loop of links
        return removed
    for entry in entries:
        match = _LEFTOVER.fullmatch(entry.name)
        if match is None or Path(match["name"]).suffix != (match["suffix"] or ""):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            mtime = entry.stat(follow_symlinks=False).st_mtime
            gone = _writer_gone(int(match["pid"]), mtime) if match["host"] == _HOST else None
            if gone or (gone is None and time.time() - mtime > LEFTOVER_AGE):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # removed meanwhile, no permission: left
            continue
    return removed


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8) written to ``path`` whole, through :func:`replacing`."""
    with replacing(Path(path)) as tmp:
        tmp.write_text(text, encoding="utf-8")
