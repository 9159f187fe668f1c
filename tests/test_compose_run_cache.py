"""Runs read whole from an experiment's cache (issue 27, item 4): a second experiment over the
same ``cache_dir`` reads each pipeline's finished run (``cache_dir/runs``) without walking a
stage; a change of a parameter, of the queries, of the limit or of the index recomputes. Oracles:
the same pipelines in an experiment without a cache, and each pipeline run on its own."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, Experiment, as_stage
from kolm_search.compose.queries import CodedRun, prepare_queries, run_coded
from kolm_search.compose.run_cache import RunCache
from tests.fakes import Prior, judged_cranfield


class Counted(BM25Retriever):
    calls = 0

    def retrieve_batch(self, batch: Any) -> Any:
        type(self).calls += 1
        return super().retrieve_batch(batch)


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    return judged_cranfield(30)


def _pipes(corpus: pd.DataFrame, weights: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5), k: int = 30,
           k1: float = 0.9) -> dict[str, Any]:
    first = Counted(corpus, k1=k1) % k
    return {f"prior{w}": first >> Prior(w, modulus=7, rounded=False) for w in weights}


def _run(pipes: dict[str, Any], ds: Any, cache: Path | None, **kw: Any) -> Experiment:
    kw = {"limit": 20, "drop_self_hits": False} | kw
    exp = Experiment(pipes, ds, ["ndcg@10"], progress=False, cache_dir=cache, **kw)
    exp.run_pipelines()
    return exp


def _same_as_uncached(exp: Experiment, pipes: dict[str, Any], ds: Any, **kw: Any) -> None:
    plain = _run(pipes, ds, None, **kw)
    for name in pipes:
        pd.testing.assert_frame_equal(exp.runs[name], plain.runs[name])


def test_a_second_experiment_reads_every_run_whole(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = _run(_pipes(ds.corpus), ds, tmp_path)
    assert first.run_cache is not None and first.run_cache.writes == 5
    Counted.calls = 0
    again = _run(_pipes(ds.corpus), ds, tmp_path)
    assert again.run_cache is not None and again.run_cache.reads == 5
    assert Counted.calls == 0 and not again.shared.computed and sum(again.shared.reused.values()) == 5
    assert again.shared.cache is not None and again.shared.cache.reads == 0  # type: ignore[attr-defined]
    _same_as_uncached(again, _pipes(ds.corpus), ds)
    queries = ds.judged_queries()
    for name, pipe in _pipes(ds.corpus).items():
        pd.testing.assert_frame_equal(again.runs[name], pipe(queries, limit=20))


@pytest.mark.parametrize("change", ["weight", "cutoff", "k1", "limit", "query text", "qid", "fewer queries",
                                    "index", "self hits"])
def test_any_change_recomputes(ds, tmp_path: Path, change: str) -> None:  # type: ignore[no-untyped-def]
    _run(_pipes(ds.corpus), ds, tmp_path)
    data, pipes, kw = copy.copy(ds), _pipes(ds.corpus), {}
    if change == "weight":
        pipes = _pipes(ds.corpus, (0.1, 0.2, 0.3, 0.4, 0.55))
    elif change == "cutoff":
        pipes = _pipes(ds.corpus, k=25)
    elif change == "k1":
        pipes = _pipes(ds.corpus, k1=1.3)
    elif change == "limit":
        kw = {"limit": 15}
    elif change == "query text":
        data.queries = ds.queries.assign(query=ds.queries["query"].where(ds.queries.index != 3, "shock wave boundary"))
    elif change == "qid":
        old = ds.queries["qid"].astype(str)
        data.queries = ds.queries.assign(qid=old.where(ds.queries.index != 3, "renamed"))
        data.qrels = ds.qrels.assign(qid=ds.qrels["qid"].astype(str).where(ds.qrels["qid"] != old[3], "renamed"))
    elif change == "fewer queries":
        data.queries = ds.queries.iloc[:-1].reset_index(drop=True)
    elif change == "index":
        corpus = ds.corpus.copy()
        corpus.loc[0, "content"] = "shock waves " + str(corpus.loc[0, "content"])
        data.corpus = corpus
        pipes = _pipes(corpus)
    elif change == "self hits":
        kw = {"drop_self_hits": True}
    Counted.calls = 0
    exp = _run(pipes, data, tmp_path, **kw)
    assert exp.run_cache is not None
    changed = 1 if change == "weight" else 5
    assert exp.run_cache.reads == 5 - changed and exp.run_cache.writes == changed
    if change != "qid":  # a stage's output does not depend on qids: a renamed query's are read from the stage cache
        assert sum(exp.shared.computed.values()) >= changed
    # the stage cache keeps BM25's output where its input is the same (``% 30`` asks BM25 for 30 whatever the limit)
    assert Counted.calls == (0 if change in ("weight", "limit", "self hits", "qid") else 1)
    _same_as_uncached(exp, pipes, data, **kw)
    Counted.calls = 0
    again = _run(pipes, data, tmp_path, **kw)  # and the new runs are read whole in turn
    assert again.run_cache is not None and again.run_cache.reads == 5 and not again.shared.computed
    _same_as_uncached(again, pipes, data, **kw)


def test_a_damaged_run_is_read_through_the_stage_cache(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = _run(_pipes(ds.corpus), ds, tmp_path)
    files = sorted((tmp_path / "runs").glob("*.arrow"))
    assert len(files) == 5
    files[0].write_bytes(files[0].read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match="run cache file .* is damaged"):
        again = _run(_pipes(ds.corpus), ds, tmp_path)
    assert again.run_cache is not None and again.run_cache.damaged == 1 and again.run_cache.reads == 4
    assert not again.shared.computed  # the damaged run's stages were read from the stage cache
    for name in first.runs:
        pd.testing.assert_frame_equal(again.runs[name], first.runs[name])


def test_a_stage_without_fingerprint_is_not_cached_whole(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    class Plain:
        def __init__(self, corpus: pd.DataFrame) -> None:
            self.bm25 = BM25Retriever(corpus)
            self.table = self.bm25.table

        def retrieve_batch(self, batch: Any) -> Any:
            return self.bm25.retrieve_batch(batch)

        def retrieve(self, context: Any) -> Any:
            return self.bm25.retrieve(context)

    pipes = {"plain": as_stage(Plain(ds.corpus)) % 20 >> Prior(0.3, modulus=7, rounded=False)}
    exp = _run(pipes, ds, tmp_path)
    assert exp.run_cache is not None and exp.run_cache.writes == 0
    _same_as_uncached(exp, pipes, ds)


def _coded(ds: Any, qids: str = "str") -> tuple[Any, Any, pd.DataFrame]:
    """A pipeline's coded run over the dataset's judged queries (qids as given), its stage and the queries."""
    queries = ds.judged_queries().copy()
    if qids == "int":
        queries["qid"] = np.arange(len(queries)) * 3 + 1
    pipe = _pipes(ds.corpus)["prior0.3"]
    return run_coded(pipe, prepare_queries(queries, limit=20)), pipe, queries


@pytest.mark.parametrize("qids", ["str", "int"])
def test_run_cache_round_trips_a_run_and_refuses_damage(ds, tmp_path: Path, qids: str) -> None:  # type: ignore[no-untyped-def]
    run, pipe, queries = _coded(ds, qids)
    n_q = len(run.prepared.qids)
    want = pipe(queries, limit=20)
    pd.testing.assert_frame_equal(run.frame(), want)
    cache = RunCache(tmp_path)
    assert cache.put("stage-a", "queries-1", run)
    got = cache.get("stage-a", "queries-1", run.prepared, run.table, n_q)
    assert got is not None
    pd.testing.assert_frame_equal(got.frame(), want)
    assert cache.get("stage-a", "queries-2", run.prepared, run.table, n_q) is None  # no file: not a warning
    cache.file_for("stage-b", "queries-1").write_bytes(cache.file_for("stage-a", "queries-1").read_bytes())
    with pytest.warns(RuntimeWarning, match="damaged.*'stage' is 'stage-a'"):
        assert cache.get("stage-b", "queries-1", run.prepared, run.table, n_q) is None
    with pytest.warns(RuntimeWarning, match="damaged.*'n_docs' is"):  # codes of another table
        assert cache.get("stage-a", "queries-1", run.prepared, run.table.take(np.arange(len(run.table) - 1)), n_q) is None
    with pytest.warns(RuntimeWarning, match="damaged.*'n_queries' is"):
        assert cache.get("stage-a", "queries-1", run.prepared, run.table, n_q + 1) is None
    path = cache.file_for("stage-a", "queries-1")
    good = path.read_bytes()
    rng = np.random.default_rng(0)
    for j in rng.choice(len(good), size=80, replace=False):  # any flipped byte: equal, or refused with a warning
        raw = bytearray(good)
        raw[int(j)] ^= 0xFF
        path.write_bytes(bytes(raw))
        fresh = RunCache(tmp_path)  # (no column shared with a run read before)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            back = fresh.get("stage-a", "queries-1", run.prepared, run.table, n_q)
        if back is None:
            assert any("damaged" in str(w.message) for w in seen) and fresh.damaged == 1
        else:
            pd.testing.assert_frame_equal(back.frame(), want)


def _rewrite(path: Path, change: Any) -> None:
    """The run file at ``path`` with ``change(arrays)`` applied and its checksums made anew."""
    import base64
    import json
    import zlib

    import pyarrow as pa

    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    meta = json.loads(table.schema.metadata[b"kolm_search"])
    arrays = {n: table.column(n).to_numpy().copy() for n in table.column_names}
    change(arrays, meta)
    meta["crc32"] = {"counts": zlib.crc32(base64.b64decode(meta["counts"])),
                     **{n: zlib.crc32(np.ascontiguousarray(a).data) for n, a in arrays.items()}}
    out = pa.table(arrays).replace_schema_metadata({b"kolm_search": json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, out.schema) as writer:
        writer.write_table(out)
    path.write_bytes(sink.getvalue().to_pybytes())


def test_a_run_file_with_codes_out_of_range_is_damaged_and_another_version_is_replaced(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Files whose checksums hold but whose codes or counts do not fit the table or the queries."""
    import base64

    run, _, _ = _coded(ds)
    cache = RunCache(tmp_path)
    path = cache.file_for("s", "q")
    n_q = len(run.prepared.qids)

    def far_doc(a: dict[str, Any], meta: dict[str, Any]) -> None:
        a["doc"][3] = len(run.table)

    def negative_count(a: dict[str, Any], meta: dict[str, Any]) -> None:
        counts = np.frombuffer(base64.b64decode(meta["counts"]), "<i4").copy()
        counts[:2] = counts[0] + counts[1] + 1, -1  # the same sum
        meta["counts"] = base64.b64encode(counts.tobytes()).decode()

    def fewer_counts(a: dict[str, Any], meta: dict[str, Any]) -> None:
        meta["counts"] = base64.b64encode(base64.b64decode(meta["counts"])[4:]).decode()

    def missing_entry(a: dict[str, Any], meta: dict[str, Any]) -> None:
        counts = np.frombuffer(base64.b64decode(meta["counts"]), "<i4").copy()
        counts[-1] += 1
        meta["counts"] = base64.b64encode(counts.tobytes()).decode()

    for change, what in ((far_doc, "'doc' holds"), (negative_count, "one is negative"),
                         (fewer_counts, "counts are of"), (missing_entry, "add up to")):
        assert cache.put("s", "q", run)
        _rewrite(path, change)
        with pytest.warns(RuntimeWarning, match=f"damaged.*{what}"):
            assert RunCache(tmp_path).get("s", "q", run.prepared, run.table, n_q) is None

    def older(a: dict[str, Any], meta: dict[str, Any]) -> None:
        meta["version"] = 1

    assert cache.put("s", "q", run)
    _rewrite(path, older)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not read, not warned about
        assert RunCache(tmp_path).get("s", "q", run.prepared, run.table, n_q) is None


def test_a_run_of_several_parts_is_stored_only_when_its_flat_form_is_the_same_run(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run, _, _ = _coded(ds)
    (group, q, doc, rank, score), = run.parts
    half = int(np.searchsorted(q, q[len(q) // 2]))
    split = CodedRun(run.source, run.table, [(group, q[half:], doc[half:], rank[half:], score[half:]),
                                           (group, q[:half], doc[:half], rank[:half], score[:half])])
    pd.testing.assert_frame_equal(split.frame(), run.frame())  # two parts, sorted into input order
    cache = RunCache(tmp_path)
    assert cache.put("s", "q", split)
    back = cache.get("s", "q", run.prepared, run.table, len(run.prepared.qids))
    assert back is not None
    pd.testing.assert_frame_equal(back.frame(), run.frame())
    empty = np.zeros(0, np.int64)
    with_empty = CodedRun(run.source, run.table, [(group, q, doc, rank, score),
                                                (group, empty, empty, empty, np.zeros(0))])
    pd.testing.assert_frame_equal(with_empty.frame(), run.frame())  # the empty part gives no object column
    assert cache.put("s", "q2", with_empty)
    back = cache.get("s", "q2", run.prepared, run.table, len(run.prepared.qids))
    assert back is not None
    pd.testing.assert_frame_equal(back.frame(), run.frame())


def test_every_cache_warns_of_a_damaged_file_at_its_callers_line(tmp_path: Path) -> None:
    """CacheFolder.read_checked, shared by the stage, run and measure-table caches: a garbage
    file is counted, warned about at the line that asked for it, and not used."""
    from kolm_search.compose.cache import StageCache
    from kolm_search.evaluation.table_cache import TableCache

    for cache, ask in ((StageCache(tmp_path / "s"), lambda c: c.get("a", "b", 1)),
                       (TableCache(tmp_path / "t"), lambda c: c.get("a", "b", ["x"], ["ndcg@10"]))):
        cache.file_for("a", "b").write_bytes(b"not a cache file")
        with pytest.warns(RuntimeWarning, match="cache file .* is damaged") as seen:
            assert ask(cache) is None
        assert seen[0].filename == __file__
        assert (cache.damaged, cache.reads) == (1, 0)
        cache.file_for("a", "b").unlink()
        assert ask(cache) is None and cache.damaged == 1
        cache.file_for("a", "b").symlink_to(cache.file_for("a", "b"))  # a link in a loop: damaged, not missing
        with pytest.warns(RuntimeWarning, match="cache file .* is damaged"):
            assert ask(cache) is None
        assert cache.damaged == 2


def test_a_cache_folder_is_made_or_refused_with_its_path(tmp_path: Path) -> None:
    from kolm_search.errors import KolmValueError

    (tmp_path / "f").write_text("x")
    with pytest.raises(KolmValueError, match=r"cache_dir '.*f' is a file, not a folder"):
        RunCache(tmp_path / "f")
    with pytest.raises(KolmValueError, match=r"cache_dir '.*sub' cannot be made a folder"):
        RunCache(tmp_path / "f" / "sub")
    made = RunCache(tmp_path / "new" / "deep")
    assert made.path.is_dir() and RunCache(made.path).path == made.path  # there already: taken as it is


def test_a_folder_where_a_cache_file_goes_is_warned_about_and_the_experiment_still_runs(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A folder standing where a stage output, a run or a measure table goes (no rename can
    replace it) is warned about naming it, and the entry is not stored: the experiment returns
    what it computed (oracle: an experiment without a cache), never a KolmValueError after all
    its work; every other entry is stored and read back by the next experiment."""
    from kolm_search.evaluation.table_cache import same_table

    pipes = _pipes(ds.corpus, weights=(0.1, 0.2))
    oracle = Experiment(pipes, ds, ["ndcg@10"], progress=False, limit=20).run()
    Experiment(pipes, ds, ["ndcg@10"], progress=False, limit=20, cache_dir=tmp_path / "first").run()
    files = sorted(p.relative_to(tmp_path / "first") for p in (tmp_path / "first").glob("*/*"))
    assert {f.parts[0] for f in files} == {"stages", "runs", "tables"}
    for f in files:
        (tmp_path / "second" / f).mkdir(parents=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        table = Experiment(pipes, ds, ["ndcg@10"], progress=False, limit=20, cache_dir=tmp_path / "second").run()
    assert same_table(table, oracle)
    messages = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    for f in files:
        assert any(f.name in m and "is a folder" in m for m in messages), f
    assert all((tmp_path / "second" / f).is_dir() for f in files)  # left as they are


def _experiment_into(pipes: dict[str, Any], ds: Any, cache: Path) -> None:
    Experiment(pipes, ds, ["ndcg@10"], progress=False, limit=20, cache_dir=cache).run()


def _killed_while_writing(pipes: dict[str, Any], ds: Any, cache: Path, marker: Path) -> None:
    """Writes the first stage output cut in half into its temporary file, then waits to be killed."""
    import time

    import pyarrow.parquet as pq

    real = pq.write_table

    def half(table: Any, where: Any, **kw: Any) -> None:
        real(table, where, **kw)
        data = Path(where).read_bytes()
        Path(where).write_bytes(data[: len(data) // 2])
        marker.touch()
        time.sleep(120)

    pq.write_table = half
    _experiment_into(pipes, ds, cache)


def test_concurrent_writers_and_a_writer_killed_mid_write_leave_the_cache_right(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two processes filling one cache_dir at once, and a process SIGKILLed while it writes a
    stage output: a later experiment over the folder warns of nothing, reads the entries whole
    (oracle: an experiment without a cache) and never a part of a file (writes are renames)."""
    import multiprocessing
    import os
    import signal
    import time

    from kolm_search.evaluation.table_cache import same_table

    pipes = _pipes(ds.corpus, weights=(0.1, 0.2))
    oracle = Experiment(pipes, ds, ["ndcg@10"], progress=False, limit=20).run()
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=_experiment_into, args=(pipes, ds, tmp_path / "both")) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    marker = tmp_path / "writing"
    killed = fork.Process(target=_killed_while_writing, args=(pipes, ds, tmp_path / "killed", marker))
    killed.start()
    deadline = time.monotonic() + 120
    while not marker.exists() and killed.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists()
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(30)
    for folder in ("both", "killed"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            exp = Experiment(pipes, ds, ["ndcg@10"], progress=False, limit=20, cache_dir=tmp_path / folder)
            assert same_table(exp.run(), oracle)
        assert exp.table_cache is not None and exp.table_cache.reads == (folder == "both")


def test_a_cache_dir_under_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cache_dir="~/..."`` is the folder under the home folder (was: a folder named ``~`` made
    in the current one)."""
    from kolm_search.compose.cache import cache_root

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    root = cache_root("~/runs")
    assert root == tmp_path / "home" / "runs"
    RunCache(root)
    assert (tmp_path / "home" / "runs").is_dir() and not (tmp_path / "~").exists()
