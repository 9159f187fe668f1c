"""Downloads under faults and concurrency, from a server on 127.0.0.1: cut and reset transfers,
archive bombs, unsafe members, disk errors, deadlines, killed downloaders, and 4 processes and
8 threads fetching one dataset at once."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import filelock
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search.errors import DownloadError, KolmValueError
from kolm_search.io import download_beir, load_beir
from tests.reliability._servers import Site, serve

ROOT = Path(__file__).resolve().parents[2]


def zip_bytes(members: dict[str, bytes | str], *, symlinks: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if name in symlinks:
                info.external_attr = (0o120777 << 16)
            zf.writestr(info, body)
    return buf.getvalue()


def dataset(n_docs: int = 50, pad: int = 0) -> bytes:
    """A BEIR zip; ``pad`` random hex characters per document (compress to about half)."""
    corpus = "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i} "
                                 + np.random.default_rng(i).bytes(pad // 2).hex()}) + "\n" for i in range(n_docs))
    return zip_bytes({"mini/corpus.jsonl": corpus, "mini/queries.jsonl": '{"_id": "q1", "text": "doc"}\n',
                      "mini/qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n"})


GOOD = dataset()


@pytest.fixture()
def site() -> Iterator[Site]:
    with serve() as state:
        yield state


def leftovers(cache: Path) -> list[str]:
    """What is in the cache besides finished datasets (folders with ``.complete``) and the locks."""
    found = [p.name for p in cache.iterdir() if p.name not in ("beir", ".locks")] if cache.exists() else []
    if (cache / "beir").exists():
        found += [f"beir/{p.name}" for p in (cache / "beir").iterdir() if not (p / ".complete").is_file()]
    return sorted(found)


def check_dataset(path: Path) -> None:
    assert (path / ".complete").is_file()
    assert load_beir(path).corpus.id.tolist() == [f"d{i}" for i in range(50)]


# ---------------------------------------------------------------- concurrency
CHILD = textwrap.dedent("""
    import json, pathlib, sys, time
    from kolm_search.io import download_beir
    cache, registry, gate = sys.argv[1], json.loads(sys.argv[2]), pathlib.Path(sys.argv[3])
    if sys.argv[3] != "-":  # a barrier: say ready, wait for "go"
        (gate / f"ready-{sys.argv[4]}").touch()
        deadline = time.monotonic() + 60
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    try:
        print(json.dumps({"path": str(download_beir("mini", cache, registry=registry, progress=False, timeout=10))}))
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
""")


def spawn(cache: Path, registry: dict, gate: Path | None = None, index: int = 0) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(cache), json.dumps(registry), str(gate or "-"),
                             str(index)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_four_processes_one_dataset(site: Site, tmp_path: Path) -> None:
    site.files["/mini.zip"] = dataset(pad=200)
    site.slow = 0.5  # a fetch lasts about a second, so the four overlap
    reg = site.registry("/mini.zip")
    gate = tmp_path / "gate"
    gate.mkdir()
    cache = tmp_path / "cache"
    children = [spawn(cache, reg, gate, i) for i in range(4)]
    deadline = time.monotonic() + 40
    while len(list(gate.glob("ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    (gate / "go").touch()  # all four start within milliseconds
    results = []
    for child in children:
        out, err = child.communicate(timeout=45)
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results == [{"path": str(cache / "beir" / "mini")}] * 4, results
    assert site.hits == ["/mini.zip"]  # one fetch; the others waited and reused it
    assert leftovers(cache) == []
    check_dataset(cache / "beir" / "mini")


def test_eight_threads_one_dataset(site: Site, tmp_path: Path) -> None:
    site.files["/mini.zip"] = GOOD
    site.slow = 0.05
    reg = site.registry("/mini.zip")
    barrier = threading.Barrier(8)
    results: list[object] = [None] * 8

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            results[i] = download_beir("mini", tmp_path, registry=reg, progress=False, timeout=10)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [tmp_path / "beir" / "mini"] * 8, results
    assert site.hits == ["/mini.zip"] and leftovers(tmp_path) == []
    check_dataset(tmp_path / "beir" / "mini")
    # force downloads again and swaps the folder in one rename
    assert download_beir("mini", tmp_path, registry=reg, progress=False, force=True) == tmp_path / "beir" / "mini"
    assert len(site.hits) == 2 and leftovers(tmp_path) == []


def test_lock_wait_has_a_deadline(site: Site, tmp_path: Path) -> None:
    site.files["/mini.zip"] = GOOD
    (tmp_path / ".locks").mkdir()
    holder = filelock.FileLock(str(tmp_path / ".locks" / "beir-mini.lock"))
    with holder:
        t0 = time.monotonic()
        with pytest.raises(DownloadError, match=r"waited 0.5s for another download of 'mini'"):
            download_beir("mini", tmp_path, registry=site.registry("/mini.zip"), progress=False, max_seconds=0.5)
        assert 0.4 < time.monotonic() - t0 < 3
    assert site.hits == []
    check_dataset(download_beir("mini", tmp_path, registry=site.registry("/mini.zip"), progress=False))


def test_killed_downloader_leaves_no_stuck_lock(site: Site, tmp_path: Path) -> None:
    """A process killed mid-download: the next caller gets the lock and cleans its temporaries."""
    site.files["/slow.zip"] = dataset(pad=400)
    site.slow = 1.0
    child = spawn(tmp_path, site.registry("/slow.zip"))
    deadline = time.monotonic() + 30
    while not list((tmp_path / "beir").glob(".mini.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list((tmp_path / "beir").glob(".mini.tmp-*")), "the child never started writing"
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=10)
    (tmp_path / "beir" / ".other.tmp-keep.zip").write_bytes(b"")  # another dataset's: not touched
    site.slow = 0.0
    site.files["/mini.zip"] = GOOD
    check_dataset(download_beir("mini", tmp_path, registry=site.registry("/mini.zip"), progress=False))
    assert leftovers(tmp_path) == ["beir/.other.tmp-keep.zip"]


# ---------------------------------------------------------------- cut transfers
@settings(max_examples=25, deadline=None)
@given(fraction=st.floats(0.0, 0.999), rst=st.booleans(), no_length=st.booleans(), md5=st.booleans())
def test_any_cut_download_is_a_download_error(tmp_path_factory: pytest.TempPathFactory, fraction: float,
                                              rst: bool, no_length: bool, md5: bool) -> None:
    """A transfer cut at any byte (FIN or RST, with or without Content-Length, with or without a
    checksum) is a DownloadError, and no dataset or temporary is left."""
    with serve() as site:
        cache = tmp_path_factory.mktemp("cut")
        site.files["/mini.zip"] = GOOD
        site.cut["/mini.zip"] = (int(fraction * len(GOOD)), rst)
        if no_length:
            site.no_length.add("/mini.zip")
        reg = site.registry("/mini.zip", md5="auto" if md5 else None)
        with pytest.raises(DownloadError, match=r"'mini'"):
            download_beir("mini", cache, registry=reg, progress=False, timeout=5)
        assert leftovers(cache) == [] and not (cache / "beir" / "mini").exists()


@pytest.mark.parametrize("case, match", [
    ("404", "HTTP 404"), ("refused", "failed after 0 bytes"), ("bad-checksum", "checksum mismatch"),
    ("not-a-zip", "not a valid zip"), ("slip", "escape"), ("absolute", "escape"), ("symlink", "symbolic link"),
    ("no-corpus", "no corpus.jsonl"), ("bad-url", "failed"),
])
def test_every_failure_is_a_download_error_naming_the_source(site: Site, tmp_path: Path, case: str, match: str) -> None:
    site.files.update({"/good.zip": GOOD, "/junk.zip": b"PK\x03\x04 not really a zip",
                       "/slip.zip": zip_bytes({"mini/corpus.jsonl": "{}", "mini/../../x.txt": "x"}),
                       "/abs.zip": zip_bytes({"mini/corpus.jsonl": "{}", "/tmp/kolm-abs-member.txt": "x"}),
                       "/link.zip": zip_bytes({"mini/corpus.jsonl": "{}", "mini/link": "/etc/passwd"},
                                              symlinks=("mini/link",)),
                       "/empty.zip": zip_bytes({"mini/readme.txt": "nothing"})})
    reg = {
        "404": site.registry("/missing.zip", GOOD), "refused": {"mini": {"url": "http://127.0.0.1:9/x.zip"}},
        "bad-checksum": site.registry("/good.zip", md5="0" * 32), "not-a-zip": site.registry("/junk.zip"),
        "slip": site.registry("/slip.zip"), "absolute": site.registry("/abs.zip"),
        "symlink": site.registry("/link.zip"), "no-corpus": site.registry("/empty.zip"),
        "bad-url": {"mini": {"url": "http://[::1"}},
    }[case]
    with pytest.raises(DownloadError, match=match) as info:
        download_beir("mini", tmp_path, registry=reg, progress=False, timeout=5)
    assert "'mini'" in str(info.value) and isinstance(info.value, OSError)
    assert leftovers(tmp_path) == [] and not (tmp_path / "beir" / "mini").exists()
    assert not (tmp_path / "x.txt").exists() and not Path("/tmp/kolm-abs-member.txt").exists()


def test_bad_names_and_entries(tmp_path: Path) -> None:
    for name in ("../evil", "a/b", ".hidden", ""):
        with pytest.raises(KolmValueError, match="plain folder name"):
            download_beir(name, tmp_path, registry={name: {"url": "http://127.0.0.1:9/x.zip"}})
    with pytest.raises(KolmValueError, match="'url'"):
        download_beir("mini", tmp_path, registry={"mini": {"md5": "x"}})
    good = {"mini": {"url": "http://127.0.0.1:9/x.zip"}}
    for option, value in (("timeout", 0), ("max_seconds", -1), ("max_seconds", float("nan")),
                          ("max_unpacked_bytes", 0), ("max_seconds", float("inf"))):
        with pytest.raises(KolmValueError, match=option):
            download_beir("mini", tmp_path, registry=good, **{option: value})
    assert not (tmp_path / "evil").exists()


# ---------------------------------------------------------------- bombs, sizes, deadlines, disks
def test_archive_bombs_are_refused(site: Site, tmp_path: Path) -> None:
    big = dataset(pad=2000)  # ~100 KB unpacked, ~55 KB zipped
    site.files["/big.zip"] = big
    assert len(big) < 80_000
    with pytest.raises(DownloadError, match="unpack to .* more than max_unpacked_bytes=80000"):
        download_beir("mini", tmp_path, registry=site.registry("/big.zip"), progress=False, max_unpacked_bytes=80_000)
    zeros = zip_bytes({"mini/corpus.jsonl": "{}\n", "mini/zeros.bin": b"\0" * (20 << 20)})
    assert len(zeros) < 100_000
    site.files["/zeros.zip"] = zeros
    with pytest.raises(DownloadError, match="ratio over 200.*archive bomb"):
        download_beir("mini", tmp_path, registry=site.registry("/zeros.zip"), progress=False)
    site.files["/huge.zip"] = big
    with pytest.raises(DownloadError, match="announces .* more than max_unpacked_bytes=1000"):
        download_beir("mini", tmp_path, registry=site.registry("/huge.zip"), progress=False, max_unpacked_bytes=1000)
    site.no_length.add("/huge.zip")
    with pytest.raises(DownloadError, match="sent more than max_unpacked_bytes=1000"):
        download_beir("mini", tmp_path, registry=site.registry("/huge.zip"), progress=False, max_unpacked_bytes=1000)
    assert leftovers(tmp_path) == []
    check_dataset(download_beir("mini", tmp_path, registry=site.registry("/big.zip"), progress=False))


def test_lying_member_sizes_cannot_exceed_the_cap(site: Site, tmp_path: Path) -> None:
    """A member whose header declares 10 bytes but holds 200 KB: zipfile stops at the declared
    size and the CRC check fails, so the lie is a DownloadError, not an unbounded write."""
    body = dataset(pad=4000)
    archive = bytearray(body)
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        info = zf.getinfo("mini/corpus.jsonl")
        size = info.file_size
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # patch the size in the local and central headers
        at = archive.find(sig)
        while at >= 0:
            offset = at + (22 if sig == b"PK\x03\x04" else 24)
            if struct.unpack_from("<I", archive, offset)[0] == size:
                struct.pack_into("<I", archive, offset, 10)
            at = archive.find(sig, at + 4)
    site.files["/lie.zip"] = bytes(archive)
    with pytest.raises(DownloadError, match="not a valid zip"):
        download_beir("mini", tmp_path, registry=site.registry("/lie.zip"), progress=False, max_unpacked_bytes=150_000)
    assert leftovers(tmp_path) == []


def test_slow_download_has_a_total_deadline(site: Site, tmp_path: Path) -> None:
    site.files["/slow.zip"] = dataset(pad=1000)
    site.slow = 0.5  # each read arrives well within `timeout`, the whole would take several seconds
    assert len(site.files["/slow.zip"]) > 6 * 4096
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match="took longer than max_seconds"):
        download_beir("mini", tmp_path, registry=site.registry("/slow.zip"), progress=False, timeout=5, max_seconds=1)
    assert time.monotonic() - t0 < 3 and leftovers(tmp_path) == []


DISK_CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from kolm_search.io import download_beir
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[4]), int(sys.argv[4])))
    try:
        download_beir("mini", sys.argv[1], registry=json.loads(sys.argv[2]), progress=False)
        print(json.dumps({"ok": True}))
    except Exception as exc:
        print(json.dumps({"type": type(exc).__name__, "oserror": isinstance(exc, OSError), "message": str(exc)}))
""")


@pytest.mark.parametrize("where", [".zip", "corpus.jsonl"])
def test_disk_errors_name_the_file(site: Site, tmp_path: Path, where: str) -> None:
    """A full disk (a file size limit, EFBIG) while saving or unpacking: DownloadError naming the file."""
    site.files["/big.zip"] = body = dataset(pad=2000) if where == ".zip" else dataset(n_docs=50, pad=30_000)
    limit = 20_000 if where == ".zip" else len(body) + 1000  # the download fits, corpus.jsonl does not
    assert len(body) > 20_000
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", DISK_CHILD, str(tmp_path), json.dumps(site.registry("/big.zip")),
                          "0", str(limit)], capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["type"] == "DownloadError" and result["oserror"], result
    assert where in result["message"] and "File too large" in result["message"], result
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------- fuzzed archives
@settings(max_examples=30, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(1, 255)), min_size=1, max_size=4))
def test_corrupted_archives_fail_cleanly_or_stay_inside(tmp_path_factory: pytest.TempPathFactory,
                                                        flips: list[tuple[int, int]]) -> None:
    """Random byte flips in the archive (no checksum to catch them): a DownloadError, or a
    dataset whose every file is inside its folder; never another exception, never a leftover."""
    data = bytearray(GOOD)
    for at, xor in flips:
        data[at] ^= xor
    with serve() as site:
        cache = tmp_path_factory.mktemp("flip")
        site.files["/mini.zip"] = bytes(data)
        try:
            path = download_beir("mini", cache, registry=site.registry("/mini.zip", md5=None), progress=False)
        except DownloadError:
            assert not (cache / "beir" / "mini").exists()
        else:
            assert (path / ".complete").is_file()
            assert all(p.resolve().is_relative_to(path) for p in path.rglob("*"))
        assert leftovers(cache) == []


# ---------------------------------------------------------------- one retry policy (shared with the LLM client)
def test_busy_servers_are_retried_under_the_shared_policy(site: Site, tmp_path: Path) -> None:
    from kolm_search._http import RetryPolicy

    site.files["/mini.zip"] = GOOD
    site.replies["/mini.zip"] = [(503, {}), (429, {"Retry-After": "0.2"})]
    t0 = time.monotonic()
    path = download_beir("mini", tmp_path, registry=site.registry("/mini.zip"), progress=False,
                         retry=RetryPolicy(max_retries=2, backoff=0.05))
    assert time.monotonic() - t0 >= 0.25  # 0.05 s of backoff, then the server's 0.2 s
    check_dataset(path)
    assert site.hits == ["/mini.zip"] * 3
    site.replies["/other.zip"] = [(503, {})] * 3
    site.files["/other.zip"] = GOOD
    with pytest.raises(DownloadError, match=r"'mini'.*failed after 3 attempt\(s\): HTTP 503"):
        download_beir("mini", tmp_path / "b", registry=site.registry("/other.zip"), progress=False,
                      retry=RetryPolicy(max_retries=2, backoff=0.01))
    site.replies["/late.zip"] = [(503, {"Retry-After": "3600"})]
    site.files["/late.zip"] = GOOD
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=r"failed after 1 attempt\(s\): HTTP 503"):
        download_beir("mini", tmp_path / "c", registry=site.registry("/late.zip"), progress=False)
    assert time.monotonic() - t0 < 2  # asked to wait an hour, more than max_retry_after: not waiting
    assert leftovers(tmp_path / "b") == [] and leftovers(tmp_path / "c") == []
