"""Caches on disk and in memory under corruption, deletion and concurrency.

SqliteCache and CachedEmbedder: a file that is not their table (random bytes, truncated,
text, another database, another layout) is moved aside with a warning naming it and
rebuilt, or refused by name under ``on_corrupt="raise"``; a file deleted while in use comes
back; a tampered row is a miss with a warning, never a crash or a wrong value; a lock held
too long is a clear error within its deadline. InMemoryCache under 8 threads loses nothing
and honours TTL. Two processes share one file of each store without losing anything.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import KolmValueError, SearchError
from kolm_search.adapters import CachedEmbedder, InMemoryCache, SqliteCache
from tests.fakes import BatchHashEmbedder, ListLogger

TEXTS = [f"text number {i} \u00e9" for i in range(30)]


def valid_cache_bytes(tmp: Path) -> bytes:
    SqliteCache(tmp / "seed.sqlite").set("k", {"i": 0})
    fill(tmp / "seed.sqlite", 300)
    return (tmp / "seed.sqlite").read_bytes()


def fill(path: Path, n: int) -> None:
    """``n`` rows k0.. of several hundred bytes, in one transaction (several pages)."""
    with sqlite3.connect(path) as db:
        db.executemany("INSERT OR REPLACE INTO cache VALUES (?, ?, NULL)", [(f"k{i}", '"' + "v" * 300 + '"')
                                                                            for i in range(n)])


def other_database(tmp: Path, sql: str) -> bytes:
    path = tmp / f"other{abs(hash(sql))}.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(sql)
    data = path.read_bytes()
    path.unlink()
    return data


def corrupt_variants(tmp: Path) -> dict[str, bytes]:
    seed = valid_cache_bytes(tmp)
    return {
        "random-bytes": np.random.default_rng(0).bytes(5000),
        "sqlite-header-then-garbage": b"SQLite format 3\x00" + np.random.default_rng(1).bytes(3000),
        "truncated-header": seed[:50],
        "text-file": b"this is not a database\n" * 20,
        "another-database": other_database(tmp, "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('x');"),
        "wrong-columns": other_database(tmp, "CREATE TABLE cache (key TEXT, blob BLOB); CREATE TABLE emb (k TEXT);"),
        "old-embedding-layout": other_database(
            tmp, "CREATE TABLE emb (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, vec BLOB NOT NULL);"),
    }


def open_store(kind: str, path: Path, **kw: Any) -> Any:
    if kind == "cache":
        return SqliteCache(path, **kw)
    return CachedEmbedder(BatchHashEmbedder(), path, model_id="hash", **kw)


def exercise(kind: str, store: Any) -> None:
    """The store works: what is written is read back (the embedder's vectors are the inner's)."""
    if kind == "cache":
        store.set("a", {"x": [1, 2]})
        assert store.get("a") == {"x": [1, 2]} and store.get("missing") is None
    else:
        want = np.array([BatchHashEmbedder().vector(t) for t in TEXTS[:5]], np.float32)
        np.testing.assert_array_equal(store.embed_many(TEXTS[:5]), want)
        np.testing.assert_array_equal(store.embed_many(TEXTS[:5]), want)  # from the file now


def warned_about(logger: ListLogger, path: Path) -> bool:
    return any(level == "warn" and str(path) in message for level, message, _ in logger.records)


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return corrupt_variants(tmp_path_factory.mktemp("variants"))


VARIANTS = ["random-bytes", "sqlite-header-then-garbage", "truncated-header", "text-file", "another-database",
            "wrong-columns", "old-embedding-layout"]


@pytest.mark.parametrize("kind", ["cache", "embedder"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_corrupt_file_is_moved_aside_and_rebuilt(tmp_path: Path, variants: dict[str, bytes], kind: str,
                                                 variant: str) -> None:
    path = tmp_path / "store.sqlite"
    path.write_bytes(variants[variant])
    logger = ListLogger()
    store = open_store(kind, path, logger=logger)
    exercise(kind, store)
    aside = list(tmp_path.glob("store.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == variants[variant]  # nothing deleted
    assert warned_about(logger, path) and any(str(aside[0]) in m for _, m, _ in logger.records)


@pytest.mark.parametrize("kind", ["cache", "embedder"])
@pytest.mark.parametrize("variant", ["random-bytes", "text-file", "another-database", "wrong-columns"])
def test_on_corrupt_raise_names_the_file_and_leaves_it(tmp_path: Path, variants: dict[str, bytes], kind: str,
                                                       variant: str) -> None:
    path = tmp_path / "store.sqlite"
    path.write_bytes(variants[variant])
    with pytest.raises(KolmValueError, match="store.sqlite") as info:
        open_store(kind, path, on_corrupt="raise")
    assert "on_corrupt" in str(info.value)
    assert path.read_bytes() == variants[variant] and not list(tmp_path.glob("*.corrupt-*"))


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(KolmValueError, match="on_corrupt"):
        SqliteCache(tmp_path / "c.sqlite", on_corrupt="ignore")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timeout"):
        SqliteCache(tmp_path / "c.sqlite", timeout=0)
    (tmp_path / "folder.sqlite").mkdir()  # a folder where the file should be: named, not a bare sqlite3 error
    for kind in ("cache", "embedder"):
        with pytest.raises(KolmValueError, match="folder.sqlite"):
            open_store(kind, tmp_path / "folder.sqlite")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=4096), header=st.booleans(), kind=st.sampled_from(["cache", "embedder"]))
def test_random_bytes_never_break_a_store(tmp_path: Path, data: bytes, header: bool, kind: str) -> None:
    folder = tmp_path / f"h{time.monotonic_ns()}"
    folder.mkdir()
    path = folder / "store.sqlite"
    path.write_bytes((b"SQLite format 3\x00" if header else b"") + data)
    exercise(kind, open_store(kind, path, logger=ListLogger()))


@pytest.mark.parametrize("kind", ["cache", "embedder"])
@pytest.mark.parametrize("how", ["random-bytes", "truncated", "garbage-pages", "another-database"])
def test_file_corrupted_while_in_use(tmp_path: Path, variants: dict[str, bytes], kind: str, how: str) -> None:
    """The file is replaced under a live store: the next calls rebuild it and keep working."""
    path = tmp_path / "store.sqlite"
    logger = ListLogger()
    store = open_store(kind, path, logger=logger)
    exercise(kind, store)
    if how in ("truncated", "garbage-pages"):
        if kind == "cache":
            fill(path, 400)  # enough rows for several pages, then cut the file
        else:
            store.embed_many(TEXTS)
        data = path.read_bytes()
        if how == "truncated":
            path.write_bytes(data[: len(data) // 3])
        else:  # the first page (the schema) intact, every later page garbage
            path.write_bytes(data[:4096] + np.random.default_rng(3).bytes(len(data) - 4096))
    else:
        path.write_bytes(variants[how])
    if kind == "cache":
        for i in range(0, 400, 37):
            assert store.get(f"k{i}") in (None, "v" * 300)  # a miss or the right value, never garbage
    exercise(kind, store)
    assert warned_about(logger, path) or (how != "random-bytes" and kind == "embedder")  # a small file may survive


@pytest.mark.parametrize("kind", ["cache", "embedder"])
@pytest.mark.parametrize("what", ["file", "folder"])
def test_deleted_while_in_use_is_recreated(tmp_path: Path, kind: str, what: str) -> None:
    path = tmp_path / "sub" / "store.sqlite"
    store = open_store(kind, path)
    exercise(kind, store)
    if what == "file":
        path.unlink()
    else:
        import shutil

        shutil.rmtree(path.parent)
    exercise(kind, store)
    assert path.is_file()


def test_tampered_cache_rows_are_misses_with_a_warning(tmp_path: Path) -> None:
    logger = ListLogger()
    cache = SqliteCache(tmp_path / "c.sqlite", logger=logger)
    for key in ("bad-json", "bad-expiry", "blob", "deep"):
        cache.set(key, 1)
    with sqlite3.connect(tmp_path / "c.sqlite") as db:
        db.execute("UPDATE cache SET value = '{not json' WHERE key = 'bad-json'")
        db.execute("UPDATE cache SET expires = 'tomorrow' WHERE key = 'bad-expiry'")  # compared to a float before
        db.execute("UPDATE cache SET value = x'80ff' WHERE key = 'blob'")
        db.execute("UPDATE cache SET value = ? WHERE key = 'deep'", ("[" * 100_000,))
    for key in ("bad-json", "bad-expiry", "blob", "deep"):
        assert cache.get(key) is None
    assert sum(level == "warn" for level, _, _ in logger.records) == 4
    cache.set("surrogate", "\ud800 text")  # a str that is not UTF-8 is stored escaped
    assert cache.get("surrogate") == "\ud800 text"


@pytest.mark.parametrize("tamper", ["flip-a-byte", "other-dim", "nan", "short", "digest", "text-vec"])
def test_tampered_embeddings_are_recomputed_never_returned(tmp_path: Path, tamper: str) -> None:
    logger = ListLogger()
    inner = BatchHashEmbedder()
    store = CachedEmbedder(inner, tmp_path / "e.sqlite", model_id="hash", logger=logger)
    want = store.embed_many(TEXTS[:4])
    with sqlite3.connect(tmp_path / "e.sqlite") as db:
        key, dim, vec, digest = db.execute("SELECT key, dim, vec, digest FROM emb LIMIT 1").fetchone()
        changed = {
            "flip-a-byte": (dim, bytes([vec[0] ^ 1]) + vec[1:], digest),
            "other-dim": (dim // 2, vec[: len(vec) // 2], digest),
            "nan": (dim, np.full(dim, np.nan, "<f4").tobytes(), digest),
            "short": (dim, vec[:-1], digest),
            "digest": (dim, vec, b"\x00" * 16),
            "text-vec": (dim, "not bytes", digest),
        }[tamper]
        db.execute("UPDATE emb SET dim = ?, vec = ?, digest = ? WHERE key = ?", (*changed, key))
    inner.calls.clear()
    np.testing.assert_array_equal(store.embed_many(TEXTS[:4]), want)
    assert len(inner.calls) == 1 and len(inner.calls[0][1]) == 1  # only the tampered one recomputed
    assert any(level == "warn" for level, _, _ in logger.records)


def test_embeddings_of_another_dimension_are_recomputed(tmp_path: Path) -> None:
    """The same model id, a model that changed its size: no np.stack crash, fresh vectors."""
    class Wide(BatchHashEmbedder):
        dim = 12

    first = CachedEmbedder(BatchHashEmbedder(), tmp_path / "e.sqlite", model_id="m")
    first.embed_many(TEXTS[:3])
    logger = ListLogger()
    second = CachedEmbedder(Wide(), tmp_path / "e.sqlite", model_id="m", logger=logger)
    got = second.embed_many(TEXTS[:5])
    np.testing.assert_allclose(got, np.array([Wide().vector(t) for t in TEXTS[:5]]), rtol=1e-6)
    assert got.shape == (5, 12) and any("dimension" in m for _, m, _ in logger.records)


@pytest.mark.parametrize("kind", ["cache", "embedder"])
def test_a_lock_held_too_long_is_a_clear_error_within_the_deadline(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "store.sqlite"
    store = open_store(kind, path, timeout=0.3)
    exercise(kind, store)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        start = time.monotonic()
        with pytest.raises(SearchError, match="store.sqlite.*locked") as info:
            store.set("b", 2) if kind == "cache" else store.embed_many(["never seen"])
        assert time.monotonic() - start < 5
        assert info.value.stage == ("cache.set" if kind == "cache" else "embedder")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    exercise(kind, store)


# ---------------------------------------------------------------- in-memory cache, 8 threads
class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now


def hammer(n_threads: int, body: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            body(i)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_in_memory_cache_under_8_threads_loses_no_write() -> None:
    cache = InMemoryCache(max_entries=8 * 200 + 50)
    shared = [f"shared{j}" for j in range(20)]

    def body(i: int) -> None:
        for j in range(200):
            cache.set(f"t{i}-k{j}", (i, j))  # each thread's own keys: its writes must all survive
            assert cache.get(f"t{i}-k{j}") == (i, j)
            cache.set(shared[j % 20], (i, j))  # contended keys: any thread's last value, never garbage
            got = cache.get(shared[(j * 7) % 20])
            assert got is None or (isinstance(got, tuple) and len(got) == 2)

    assert hammer(8, body) == []
    assert all(cache.get(f"t{i}-k{j}") == (i, j) for i in range(8) for j in range(200))
    assert len(cache) <= cache.max_entries


def test_in_memory_cache_under_8_threads_keeps_lru_bound_and_ttl() -> None:
    clock = Clock()
    cache = InMemoryCache(max_entries=100, ttl_seconds=5, clock=clock)

    def body(i: int) -> None:
        for j in range(300):
            cache.set(f"t{i}-{j}", j, ttl_seconds=1 if j % 2 else None)
            cache.get(f"t{(i + 1) % 8}-{j}")
            assert len(cache) <= 100 + 8  # bounded while writers race (each may hold one extra)

    assert hammer(8, body) == []
    assert len(cache) <= 100
    alive = [k for i in range(8) for j in range(300) if cache.get(k := f"t{i}-{j}") is not None]
    with clock.lock:
        clock.now = 1.0  # the 1-second entries are gone, the 5-second ones remain
    assert all(cache.get(k) is None for k in alive if int(k.split("-")[1]) % 2)
    assert all(cache.get(k) is not None for k in alive if not int(k.split("-")[1]) % 2)
    with clock.lock:
        clock.now = 5.0
    assert all(cache.get(k) is None for k in alive)


# ---------------------------------------------------------------- two processes, one file each
def cache_worker(path: str, me: int, n: int, barrier: Any = None) -> None:
    if barrier is not None:  # both open the file at the same moment
        barrier.wait(timeout=60)
    cache = SqliteCache(path, timeout=30)
    for j in range(n):
        cache.set(f"p{me}-{j}", {"p": me, "j": j})
        other = cache.get(f"p{1 - me}-{j}")
        assert other is None or other == {"p": 1 - me, "j": j}


def embedder_worker(path: str, me: int, n: int) -> None:
    store = CachedEmbedder(BatchHashEmbedder(), path, model_id="hash", timeout=30)
    for start in range(0, n, 5):  # overlapping texts: both processes write some of the same keys
        got = store.embed_many([f"text {me * n // 2 + k}" for k in range(start, start + 5)])
        want = np.array([BatchHashEmbedder().vector(f"text {me * n // 2 + k}") for k in range(start, start + 5)])
        assert np.allclose(got, want, rtol=1e-6)


def run_two(worker: Callable[..., None], *args: Any) -> list[int | None]:
    """Run ``worker(args[0], me, *args[1:])`` in two spawned processes (me = 0, 1); their exit codes
    (each waited for at most 120 s, then killed)."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(args[0], me, *args[1:])) for me in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    return [p.exitcode for p in procs]


@pytest.mark.parametrize("worker", [cache_worker, embedder_worker])
def test_two_processes_share_one_file(tmp_path: Path, worker: Callable[[str, int, int], None]) -> None:
    path = tmp_path / "shared.sqlite"
    n = 60
    assert run_two(worker, str(path), n) == [0, 0]
    assert not list(tmp_path.glob("*.corrupt-*"))
    if worker is cache_worker:
        cache = SqliteCache(path)
        assert all(cache.get(f"p{me}-{j}") == {"p": me, "j": j} for me in (0, 1) for j in range(n))
    else:
        inner = BatchHashEmbedder()
        store = CachedEmbedder(inner, path, model_id="hash")
        texts = [f"text {k}" for k in range(n // 2 * 3)]
        np.testing.assert_allclose(store.embed_many(texts), np.array([inner.vector(t) for t in texts]), rtol=1e-6)
        assert inner.calls == []  # every vector written by one of the two processes is there


def test_two_processes_opening_one_corrupt_file_set_it_aside_once(tmp_path: Path) -> None:
    """Both find the file corrupt; one moves it aside, the other keeps the rebuilt file: nothing
    either writes afterwards is lost."""
    path = tmp_path / "shared.sqlite"
    path.write_bytes(np.random.default_rng(5).bytes(8192))
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    assert run_two(cache_worker, str(path), 40, barrier) == [0, 0]
    assert len(list(tmp_path.glob("shared.sqlite.corrupt-*"))) == 1
    cache = SqliteCache(path)
    assert all(cache.get(f"p{me}-{j}") == {"p": me, "j": j} for me in (0, 1) for j in range(40))


@pytest.mark.parametrize("make", [lambda p: InMemoryCache(), lambda p: SqliteCache(p / "c.sqlite")])
def test_ttl_must_be_a_number(tmp_path: Path, make: Callable[[Path], Any]) -> None:
    """A NaN TTL never compares as reached: the entry would live forever. Refused instead."""
    cache = make(tmp_path)
    for bad in (float("nan"), "10", True):
        with pytest.raises(KolmValueError, match="ttl_seconds"):
            cache.set("k", 1, ttl_seconds=bad)
    cache.set("forever", 1, ttl_seconds=float("inf"))
    cache.set("gone", 1, ttl_seconds=-1)
    assert cache.get("forever") == 1 and cache.get("gone") is None
    with pytest.raises(KolmValueError, match="ttl_seconds"):
        InMemoryCache(ttl_seconds=float("nan"))


@pytest.mark.parametrize("store", ["cache", "embeddings"])
def test_threads_creating_one_new_store_never_set_it_aside(tmp_path: Path, store: str) -> None:
    """A connection that reads the schema just before another creates the table must not take
    the new file for a corrupt one (it did: 'holds tables ['emb'] but no 'emb'', data lost)."""
    from kolm_search.adapters import CachedEmbedder, SqliteCache
    from tests.fakes import BatchHashEmbedder

    for rep in range(20):
        folder = tmp_path / str(rep)
        errors: list[BaseException] = []

        def work(i: int, folder: Path = folder, errors: list[BaseException] = errors) -> None:
            try:
                if store == "cache":
                    SqliteCache(folder / "c.sqlite").set(f"k{i}", {"v": i}, 60)
                else:
                    CachedEmbedder(BatchHashEmbedder(), folder / "e.sqlite", model_id="m").embed_many([f"t{i}"])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert [p.name for p in folder.iterdir() if ".corrupt-" in p.name] == []
