"""Temporary files of writes killed midway (``kolm_search.io._atomic``): a write through
``replacing`` names its temporary file by its host and pid, and opening a cache folder removes
the ones whose writer is gone, never a live writer's, never another file. Real processes: a
child blocks inside ``with replacing(...)`` after writing part of the file, and is SIGKILLed
(or let go on)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kolm_search.compose.cache import StageCache
from kolm_search.compose.run_cache import RunCache
from kolm_search.evaluation.table_cache import TableCache
from kolm_search.io import _atomic
from kolm_search.io._atomic import LEFTOVER_AGE, replacing, sweep_leftovers

ROOT = Path(__file__).resolve().parents[1]
H = _atomic._HOST
OTHER_HOST = "0123abcd" if H != "0123abcd" else "abcd0123"
CHILD = """
import sys
from pathlib import Path
from kolm_search.io._atomic import replacing
with replacing(Path(sys.argv[1])) as tmp:
    tmp.write_bytes(b"half of ")
    print(tmp, flush=True)
    sys.stdin.readline()  # (blocks until the parent says go on, or kills it)
    with tmp.open("ab") as fh:
        fh.write(b"the entry")
"""
_folders = itertools.count()


class Writer:
    """A child process inside ``with replacing(target)``, its part written to :attr:`tmp`."""

    def __init__(self, target: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(target)], cwd=ROOT, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.tmp = Path(self.proc.stdout.readline().strip())
        assert self.tmp.is_file(), self.proc.wait()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait() == -signal.SIGKILL  # (reaped: not a zombie)

    def finish(self) -> None:
        self.proc.communicate("go on\n", timeout=120)
        assert self.proc.returncode == 0


@pytest.fixture
def writers() -> Iterator[list[Writer]]:
    made: list[Writer] = []
    yield made
    for w in made:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has ended (reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _age(path: Path, seconds: float) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)
    return path


def _touch(folder: Path, name: str, age: float = 0.0) -> Path:
    path = folder / name
    path.write_bytes(b"part")
    return _age(path, age)


def test_temp_name_tells_host_and_pid(tmp_path: Path) -> None:
    with replacing(tmp_path / "x.parquet") as tmp:
        name = tmp.name
    assert name.startswith(".x.parquet.") and name.endswith(f".{H}-{os.getpid()}.tmp.parquet"), name
    assert _atomic._LEFTOVER.fullmatch(name)


@pytest.mark.parametrize("cache", [StageCache, RunCache, TableCache])
def test_killed_writer_leftover_removed_when_cache_opened(tmp_path: Path, writers: list[Writer],
                                                          cache: type) -> None:
    """SIGKILL inside the block leaves the temporary file (and no entry); opening the cache
    folder removes it, and only it: the entries, a live writer's file, files of near names stay."""
    folder = tmp_path / "cache"
    folder.mkdir()
    entry = _touch(folder, "e" * 40 + ".parquet")
    near = [_touch(folder, n, 3 * LEFTOVER_AGE) for n in (".notes.tmp", "x.parquet.abcd1234.tmp.parquet")]
    writers += [Writer(folder / "a.parquet"), Writer(folder / "b.parquet")]
    killed, live = writers
    killed.kill()
    assert killed.tmp.read_bytes() == b"half of " and not (folder / "a.parquet").exists()
    cache(folder)
    assert not killed.tmp.exists()
    assert live.tmp.read_bytes() == b"half of " and entry.exists() and all(p.exists() for p in near)
    live.finish()  # the live writer's rename still works
    assert (folder / "b.parquet").read_bytes() == b"half of the entry"
    assert sorted(p.name for p in folder.iterdir()) == sorted([entry.name, "b.parquet", *(p.name for p in near)])


def test_swept_once_per_folder_per_process(tmp_path: Path, writers: list[Writer]) -> None:
    folder = tmp_path / "cache"
    writers += [Writer(folder / "a.parquet"), Writer(folder / "b.parquet")]
    writers[0].kill()
    StageCache(folder)
    assert not writers[0].tmp.exists()
    writers[1].kill()
    StageCache(folder)
    assert writers[1].tmp.exists()  # (a second opening in this process does not look again)


def test_experiment_sweeps_the_client_runs_folder(tmp_path: Path, writers: list[Writer]) -> None:
    """Client runs are stored in ``cache_dir`` itself: an Experiment over it sweeps it too."""
    from kolm_search import Experiment
    from kolm_search.io import load_dataset

    class Client:
        def search_batch(self, queries: object, **kw: object) -> object:
            raise AssertionError("not searched")

    writers.append(Writer(tmp_path / "cranfield__client__k10__q0123456789abcdef.parquet"))
    writers[0].kill()
    Experiment({"client": Client()}, load_dataset("cranfield"), cache_dir=tmp_path)
    assert not writers[0].tmp.exists()


def test_pid_of_a_live_process(tmp_path: Path, writers: list[Writer]) -> None:
    """A leftover named by the pid of a live process (the writer, or a process that took a
    killed writer's pid) is kept unless that process started more than a day after the file was
    last written (pid reuse; the day is a margin for a shared disk's clock)."""
    folder = tmp_path / "cache"
    writers.append(Writer(folder / "a.parquet"))
    pid = writers[0].proc.pid
    recent = _touch(folder, f".b.parquet.abcd1234.{H}-{pid}.tmp.parquet", LEFTOVER_AGE / 2)
    old = _touch(folder, f".c.parquet.abcd1234.{H}-{pid}.tmp.parquet", 2 * LEFTOVER_AGE)
    removed = sweep_leftovers(folder)
    assert writers[0].tmp.exists() and recent.exists()
    if Path(f"/proc/{pid}/stat").exists():  # (the start of a process is read from /proc)
        assert removed == [old] and not old.exists()
    else:
        assert old.exists()


def test_pid_not_told(tmp_path: Path, dead_pid: int) -> None:
    """Another host's (or pid namespace's) leftover: removed only when not written to for a day.
    A name without host and pid (as an older version made) is never removed: in a
    ``cache_dir='.'`` or ``'~'`` it could be a user's own file."""
    other = f".a.parquet.abcd1234.{OTHER_HOST}-{dead_pid}.tmp.parquet"
    fresh = _touch(tmp_path, other, LEFTOVER_AGE / 2)
    old = _touch(tmp_path, ".o" + other[1:], 2 * LEFTOVER_AGE)
    users = [_touch(tmp_path, n, 30 * LEFTOVER_AGE) for n in (".b.parquet.abcd_123.tmp.parquet", ".c.abcd1234.tmp",
                                                               ".notes.backup01.tmp")]
    assert sweep_leftovers(tmp_path) == [old]
    assert fresh.exists() and all(p.exists() for p in users)


def test_the_host_tag_names_the_pid_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two containers of one host name (``--net=host``) number their processes apart: their tags differ."""
    real_stat = os.stat
    tags = set()
    for inode in (4026531836, 4026532999):
        monkeypatch.setattr(os, "stat", lambda p, *a, inode=inode, **k: os.stat_result((0, inode, 0, 0, 0, 0, 0, 0, 0, 0))
                            if str(p) == "/proc/self/ns/pid" else real_stat(p, *a, **k))
        tags.add(_atomic._host_tag())
    assert len(tags) == 2


def test_no_folder_or_unremovable_never_fails(tmp_path: Path, dead_pid: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing folder, a file that cannot be removed: nothing done, nothing raised."""
    assert sweep_leftovers(tmp_path / "missing") == []
    leftover = _touch(tmp_path, f".a.bin.abcd1234.{H}-{dead_pid}.tmp.bin")

    def refuse(path: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "unlink", refuse)
    StageCache(tmp_path)  # opens
    assert leftover.exists()


def _not_leftovers(pid: int) -> list[str]:
    ok = f".x.parquet.abcd1234.{H}-{pid}.tmp.parquet"
    return ["x.parquet", ok[1:], ok + "~", ok.replace(".tmp.", ".temp."), ok.replace(".tmp.", ".tmp.x."),
            ok[:-len(".parquet")], ok.replace(".tmp.parquet", ".tmp.arrow"), ok.replace("abcd1234", "abcd123"),
            ok.replace("abcd1234", "abcd12345"), ok.replace("abcd1234", "ABCD1234"), ok.replace("abcd1234", "abcd-234"),
            ok.replace(f"-{pid}", "-0"), ok.replace(f"-{pid}", f"--{pid}"), ok.replace(f"-{pid}", f"-{pid}x"),
            ok.replace(H, H.upper() + "G"), ok.replace(f"{H}-", ""), ok.replace(f"{H}-", f"{H}"),
            f"..abcd1234.{H}-{pid}.tmp", f".abcd1234.{H}-{pid}.tmp", ".x.parquet", ".x.parquet.tmp.parquet"]


@pytest.mark.parametrize("index", range(len(_not_leftovers(1))))
def test_names_not_swept(tmp_path: Path, dead_pid: int, index: int) -> None:
    """Near names, old and naming a dead pid of this host, are kept."""
    name = _not_leftovers(dead_pid)[index]
    path = _touch(tmp_path, name, 3 * LEFTOVER_AGE)
    assert sweep_leftovers(tmp_path) == [] and path.exists(), name


@pytest.mark.parametrize("kind", ["folder", "symlink", "in a subfolder"])
def test_only_regular_files_of_the_folder(tmp_path: Path, dead_pid: int, kind: str) -> None:
    name = f".x.parquet.abcd1234.{H}-{dead_pid}.tmp.parquet"
    target = _touch(tmp_path, "target.parquet")
    if kind == "folder":
        path = tmp_path / name
        path.mkdir()
    elif kind == "symlink":
        path = tmp_path / name
        path.symlink_to(target)
    else:
        (tmp_path / "sub").mkdir()
        path = _touch(tmp_path / "sub", name)
    _age(path, 3 * LEFTOVER_AGE)
    assert sweep_leftovers(tmp_path) == [] and os.path.lexists(path) and target.exists()


_NAMES = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1,
                 max_size=30).filter(lambda n: n not in (".", ".."))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=_NAMES, cut=st.integers(0, 10**6), extra=st.sampled_from("xX.-_~0 "), insert=st.booleans())
def test_any_target_name(tmp_path: Path, dead_pid: int, monkeypatch: pytest.MonkeyPatch, target: str, cut: int,
                         extra: str, insert: bool) -> None:
    """For any target name: the leftover of a write to it by a dead process is swept; the target,
    and the leftover's name with one character left out or put in (elsewhere than in the target's
    name, which makes the leftover of another target, or the pid's digits, another pid), are
    kept."""
    folder = tmp_path / str(next(_folders))
    folder.mkdir()
    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: dead_pid)
        with replacing(folder / target) as tmp:
            leftover = tmp.name
    def edit(i: int) -> str:
        return leftover[:i] + extra + leftover[i:] if insert else leftover[:i] + leftover[i + 1:]

    free = [*range(1, 1 + len(target) + insert),  # the target's name: the leftover of another target
            *range(leftover.rindex(f"-{dead_pid}.tmp") + 1, leftover.rindex(".tmp") + insert)]  # another pid
    places = [i for i in range(len(leftover) + insert) if i not in free]
    near = edit(places[cut % len(places)])
    assume(near not in {edit(i) for i in free})  # (".a..x" less a dot is the leftover of "a" as of "a.")
    fresh = tmp_path / f"{next(_folders)}-fresh"  # (a folder not swept yet in this process: the write swept its own)
    fresh.mkdir()
    (folder / target).rename(fresh / target)
    kept = _touch(fresh, near, 3 * LEFTOVER_AGE)
    swept = _touch(fresh, leftover)
    assert sweep_leftovers(fresh) == [swept]
    assert (fresh / target).exists() and kept.exists()


def test_a_write_sweeps_its_folder(tmp_path: Path, writers: list[Writer]) -> None:
    """A killed write of an output (``-o``, a report) leaves its temporary file beside it; the
    next write to that folder in a process removes it, and nothing else (a live writer's file,
    near names, the outputs)."""
    from kolm_search.io._atomic import write_text

    folder = tmp_path / "out"
    folder.mkdir()
    near = [_touch(folder, n, 3 * LEFTOVER_AGE) for n in (".notes.tmp", "run.tsv.abcd1234.tmp.tsv", "kept.tsv")]
    writers += [Writer(folder / "run.tsv"), Writer(folder / "other.tsv")]
    killed, live = writers
    killed.kill()
    write_text(folder / "report.md", "# report\n")
    assert not killed.tmp.exists() and live.tmp.exists() and all(p.exists() for p in near)
    assert (folder / "report.md").read_text() == "# report\n"
    live.finish()
    assert (folder / "other.tsv").read_bytes() == b"half of the entry"
