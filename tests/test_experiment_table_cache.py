"""An experiment's measure table kept in its ``cache_dir`` (issue 27, speed bound (c)): a second
``Experiment.run()`` over the same folder reads the table (no run read, nothing measured) and
returns the very table the first run returned (frame, dtypes, attrs, per-query values, curves);
a damaged or foreign entry is measured again with a warning; changed qrels, metrics or settings
measure again. Oracles: the first run's table, and the table of an experiment without a cache."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, Experiment
from kolm_search.evaluation import compare, experiment_runs
from kolm_search.evaluation.table_cache import TableCache, qrels_digest, same_table
from kolm_search.io import load_dataset
from tests.fakes import Prior, judged_cranfield


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    return judged_cranfield(40)


@pytest.fixture(scope="module")
def pipes(ds):  # type: ignore[no-untyped-def]
    first = BM25Retriever(ds.corpus) % 30
    return {f"prior{w}": first >> Prior(w, modulus=7, rounded=False) for w in (0.1, 0.2, 0.3, 0.4, 0.5)}


METRICS = ["ndcg@10", "P@5", "recall@20"]


def _exp(pipes: dict[str, Any], ds: Any, cache: Path | None, metrics: list[str] = METRICS, **kw: Any) -> Experiment:
    kw = {"limit": 20, "drop_self_hits": False, "baseline": ["prior0.1", "prior0.3"]} | kw
    return Experiment(pipes, ds, metrics, progress=False, cache_dir=cache, **kw)


def _assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert a.attrs == b.attrs
    assert list(a.per_query) == list(b.per_query)
    for m in a.per_query:
        pd.testing.assert_frame_equal(a.per_query[m], b.per_query[m], check_exact=True)
    pd.testing.assert_frame_equal(a.curves, b.curves, check_exact=True)
    assert same_table(a, b)


@pytest.mark.parametrize("kw", [{}, {"test": "wilcoxon", "correction": "bh"}, {"drop_self_hits": True},
                                {"test": "tukey", "baseline": None}])
def test_a_second_run_reads_the_table_and_no_run(ds, pipes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                 kw: dict[str, Any]) -> None:
    first = _exp(pipes, ds, tmp_path, **kw)
    table = first.run()
    assert first.table_cache is not None and first.table_cache.writes == 1
    _assert_same(table, _exp(pipes, ds, None, **kw).run())  # the cache changes nothing of the table

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cached rerun measured a run")

    for name in ("evaluate_coded", "evaluate_coded_together", "evaluate"):
        monkeypatch.setattr(experiment_runs, name, refused)
    again = _exp(pipes, ds, tmp_path, **kw)
    cached = again.run()
    assert again.table_cache is not None and again.table_cache.reads == 1
    assert again.run_cache is not None and again.run_cache.reads == 0  # no run read
    assert not again.shared.computed
    _assert_same(table, cached)
    monkeypatch.undo()
    # the runs are still there when asked for (read then), equal to the first experiment's
    for name in pipes:
        pd.testing.assert_frame_equal(again.runs[name], first.runs[name])
    assert again.run_cache.reads == len(pipes) and not again.shared.computed


@pytest.mark.parametrize("change", ["qrels", "queries", "metric", "baseline", "test", "seed", "pipeline", "limit",
                                    "names"])
def test_any_change_measures_again(ds, pipes, tmp_path: Path, change: str) -> None:  # type: ignore[no-untyped-def]
    _exp(pipes, ds, tmp_path).run()
    kw: dict[str, Any] = {}
    metrics, data, chosen = METRICS, ds, pipes
    if change == "qrels":
        data = load_dataset("cranfield")
        data.queries, data.qrels = ds.queries, ds.qrels.copy()
        data.qrels.loc[0, "relevance"] = int(data.qrels.loc[0, "relevance"]) + 1
    elif change == "queries":  # a query's text changed
        data = load_dataset("cranfield")
        data.queries, data.qrels = ds.queries.copy(), ds.qrels
        data.queries.loc[0, "query"] = str(data.queries.loc[0, "query"]) + " wing"
    elif change == "metric":
        metrics = ["ndcg@10", "P@10", "recall@20"]
    elif change == "baseline":
        kw["baseline"] = "prior0.2"
    elif change == "test":
        kw["test"] = "wilcoxon"
    elif change == "seed":
        kw["seed"] = 1
    elif change == "pipeline":
        chosen = dict(pipes)
        chosen["prior0.5"] = BM25Retriever(ds.corpus) % 30 >> Prior(0.55, modulus=7, rounded=False)
    elif change == "limit":
        kw["limit"] = 15
    elif change == "names":
        chosen = {("x" + k if k == "prior0.5" else k): v for k, v in pipes.items()}
    again = _exp(chosen, data, tmp_path, metrics, **kw)
    table = again.run()
    assert again.table_cache is not None and again.table_cache.reads == 0 and again.table_cache.writes == 1
    _assert_same(table, _exp(chosen, data, None, metrics, **kw).run())


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign", "garbage"])
def test_a_damaged_or_foreign_entry_is_measured_again_with_a_warning(ds, pipes, tmp_path: Path, damage: str) -> None:  # type: ignore[no-untyped-def]
    table = _exp(pipes, ds, tmp_path).run()
    files = sorted((tmp_path / "tables").glob("*.arrow"))
    assert len(files) == 1
    path = files[0]
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(raw[: len(raw) // 2]))
    elif damage == "flip":  # a byte of the per-query values (the Arrow body, not the metadata)
        at = raw.find(np.float64(table.per_query["ndcg@10"].iloc[0, 0]).tobytes()) if \
            table.per_query["ndcg@10"].iloc[0, 0] != 0 else -1
        at = at if at >= 0 else len(raw) // 3
        raw[at] ^= 0x10
        path.write_bytes(bytes(raw))
    elif damage == "foreign":  # another experiment's entry put in this one's place
        other = tmp_path / "other"
        _exp(pipes, ds, other, ["ndcg@10", "P@10", "recall@20"]).run()
        path.write_bytes(next((other / "tables").glob("*.arrow")).read_bytes())
    else:
        path.write_bytes(b"not an arrow file")
    again = _exp(pipes, ds, tmp_path)
    with pytest.warns(RuntimeWarning, match="measure table cache file .* is damaged"):
        cached = again.run()
    assert again.table_cache is not None and again.table_cache.damaged == 1 and again.table_cache.writes == 1
    _assert_same(table, cached)
    third = _exp(pipes, ds, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _assert_same(table, third.run())  # the entry was replaced by a good one
    assert third.table_cache is not None and third.table_cache.reads == 1


def test_a_run_a_caller_set_is_measured_not_read(ds, pipes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _exp(pipes, ds, tmp_path).run()
    again = _exp(pipes, ds, tmp_path)
    mine = again.run_pipelines()["prior0.2"].copy()
    mine["score"] = -mine["score"]  # another run under a pipeline's name
    again.runs["prior0.2"] = mine
    table = again.run()
    assert again.table_cache is not None and again.table_cache.reads == 0 and again.table_cache.writes == 0
    expected = compare({n: again.runs[n] for n in pipes}, ds.qrels, METRICS, baseline=["prior0.1", "prior0.3"],
                       drop_self_hits=False)
    _assert_same(table, expected)


def test_qrels_digest_tells_values_and_types_apart(ds) -> None:  # type: ignore[no-untyped-def]
    q = ds.qrels
    assert qrels_digest(q) == qrels_digest(q.copy())
    plain = q.assign(qid=q["qid"].astype(str), doc_id=q["doc_id"].astype(str))
    changed = plain.copy()
    changed.loc[3, "doc_id"] = str(changed.loc[3, "doc_id"]) + "x"
    assert qrels_digest(changed) not in (qrels_digest(plain), None)
    mixed = pd.DataFrame({"qid": ["1", 1], "doc_id": ["a", "b"], "relevance": [1, 1]}, dtype=object)
    assert qrels_digest(mixed) is None
    as_int = q.assign(relevance=q["relevance"].astype("int32"))
    assert qrels_digest(as_int) != qrels_digest(q)


def test_a_qrels_digest_follows_number_columns_and_their_missing_values(ds) -> None:  # type: ignore[no-untyped-def]
    q = ds.qrels
    base = qrels_digest(q)
    graded = q.copy()
    graded.loc[7, "relevance"] = int(graded.loc[7, "relevance"]) + 1
    assert qrels_digest(graded) not in (base, None)
    as_float = q.assign(relevance=q["relevance"].astype(np.float64))
    assert qrels_digest(as_float) not in (base, None)
    holes = [as_float.copy(), as_float.copy()]
    holes[0].loc[0, "relevance"], holes[1].loc[1, "relevance"] = np.nan, np.nan
    assert len({qrels_digest(h) for h in holes} | {qrels_digest(as_float)}) == 3  # (digested otherwise: by pandas)
    twice = pd.concat([q, q["relevance"]], axis=1)  # two columns of one name: each digested
    assert qrels_digest(twice) not in (base, None)
    twice.iloc[2, 3] = 9
    assert qrels_digest(twice) != qrels_digest(pd.concat([q, q["relevance"]], axis=1))
    # digested by pandas (a missing value), a column 1 is not a column "1" (names by repr, as the column digest)
    named = [holes[0].assign(**{"1": 0.5}), holes[0].assign(**{"1": 0.5}).rename(columns={"1": 1})]
    assert len({qrels_digest(n) for n in named} - {None}) == 2


def test_a_table_that_would_not_read_back_equal_is_not_stored(ds, pipes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = _exp(pipes, ds, None).run()
    cache = TableCache(tmp_path)
    odd = table.copy()
    odd["extra"] = [object()] * len(odd)  # a column this format does not keep
    from kolm_search.evaluation.report import ComparisonTable

    odd = ComparisonTable(odd)
    odd.per_query, odd.curves = table.per_query, table.curves
    odd.attrs.update(table.attrs)
    assert not cache.put("a", "b", odd)
    assert not list(tmp_path.glob("*"))
    assert cache.put("a", "b", table)
    _assert_same(table, cache.get("a", "b", list(pipes), [*table.per_query]))


def test_a_table_whose_bytes_decode_otherwise_leaves_no_file(ds, pipes, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kolm_search.evaluation import table_cache

    table = _exp(pipes, ds, None).run()
    cache = TableCache(tmp_path)
    monkeypatch.setattr(table_cache, "same_table", lambda a, b: False)
    assert not cache.put("a", "b", table)
    assert not [f for f in tmp_path.rglob("*") if f.is_file()]
    monkeypatch.undo()
    assert cache.put("a", "b", table)
    _assert_same(table, cache.get("a", "b", list(pipes), [*table.per_query]))


def test_an_experiment_with_a_client_pipeline_keeps_no_table(ds, pipes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kolm_search import presets

    chosen = {"client": presets.bm25(ds.corpus), **dict(list(pipes.items())[:2])}
    first = _exp(chosen, ds, tmp_path, baseline=None).run()
    again = _exp(chosen, ds, tmp_path, baseline=None)
    table = again.run()
    assert again.table_cache is not None and again.table_cache.reads == 0 and again.table_cache.writes == 0
    assert not list((tmp_path / "tables").glob("*.arrow"))
    _assert_same(first, table)


def test_a_categorical_qrels_digest_follows_its_values(ds) -> None:  # type: ignore[no-untyped-def]
    q = ds.qrels
    assert isinstance(q["qid"].dtype, pd.CategoricalDtype)  # the packaged dataset's qrels are categorical
    base = qrels_digest(q)
    moved = q.copy()
    moved["doc_id"] = moved["doc_id"].cat.set_categories([*moved["doc_id"].cat.categories, "zz"])
    moved.loc[5, "doc_id"] = "zz"  # one value changed, the categories alike but for one more
    assert qrels_digest(moved) not in (base, None)
    swapped = q.copy()
    swapped["qid"] = swapped["qid"].cat.reorder_categories(list(reversed(swapped["qid"].cat.categories)))
    assert qrels_digest(swapped) is not None  # the same values under other codes: another entry, never a wrong one
    plain = q.assign(qid=q["qid"].astype(str))
    assert qrels_digest(plain) not in (base, None)
    missing = q.copy()
    missing.loc[0, "qid"] = None
    assert qrels_digest(missing) != base



@pytest.mark.parametrize("edit", ["queries", "qrels", "params"])
def test_a_table_measured_from_runs_made_before_a_change_is_not_stored(ds, tmp_path: Path, edit: str) -> None:  # type: ignore[no-untyped-def]
    """An experiment that ran, whose dataset's queries, qrels (which choose the judged queries)
    or a pipeline's parameters are then changed in place, measures the runs it holds (made before
    the change, as without a cache) on a second ``run()``: that table must not be stored under the
    key of the changed experiment, where a new experiment over the folder would read it (oracle:
    an experiment without a cache)."""
    first = ds.qrels["qid"].iloc[0]
    unjudged = ds.qrels["qid"] == first
    data = type(ds)(ds.corpus, ds.queries.copy(), ds.qrels[~unjudged].reset_index(drop=True), ds.name)
    pipes = {f"prior{w}": BM25Retriever(ds.corpus) % 30 >> Prior(w, modulus=7, rounded=False) for w in (0.1, 0.3)}
    exp = _exp(pipes, data, tmp_path)
    exp.run()
    if edit == "queries":
        data.queries.loc[data.queries.index[:20], "query"] = "boundary layer heat transfer"
    elif edit == "qrels":  # the judgements of a query that had none, added in place
        for row in ds.qrels[unjudged].itertuples(index=False):
            data.qrels.loc[len(data.qrels)] = list(row)
    else:
        pipes["prior0.1"].set_params(left__k=5)
    exp.run()  # the runs it holds are the ones made before the change
    _assert_same(_exp(pipes, data, tmp_path).run(), _exp(pipes, data, None).run())


def _edit(table: Any) -> None:
    """Write into every part of a table a caller can reach."""
    metric = next(iter(table.per_query))
    table.loc[table.index[0], "mean"] = -1.0
    table.loc[table.index[0], "run"] = "edited"
    table["extra"] = 1
    table.attrs["compare"]["edited"] = True
    table.per_query[metric].iloc[0, 0] = -5.0
    table.per_query.pop(next(reversed(table.per_query)))
    table.curves.iloc[0, 0] = -5.0


def test_a_table_read_again_is_not_decoded_again_and_is_a_table_of_its_own(  # type: ignore[no-untyped-def]
        ds, pipes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kolm_search.evaluation import table_cache

    table = _exp(pipes, ds, tmp_path).run()
    first = _exp(pipes, ds, tmp_path).run()  # read (its bytes decoded when stored, in this process)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("bytes decoded before were decoded again")

    monkeypatch.setattr(table_cache, "_decode", refused)
    _assert_same(table, first)
    _edit(first)
    second = _exp(pipes, ds, tmp_path)
    _assert_same(table, second.run())
    assert second.table_cache is not None and second.table_cache.reads == 1
    _edit(second.run())
    _assert_same(table, _exp(pipes, ds, tmp_path).run())


def test_a_file_holding_other_bytes_is_decoded_and_checked(ds, pipes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kolm_search.evaluation.report import ComparisonTable

    table = _exp(pipes, ds, None).run()
    other = ComparisonTable(table.copy())
    other.loc[other.index[0], "mean"] += 1.0
    other.per_query, other.curves = table.per_query, table.curves
    other.attrs.update(table.attrs)
    cache, names, keys = TableCache(tmp_path), list(pipes), [*table.per_query]
    assert cache.put("a", "b", table)
    _assert_same(table, cache.get("a", "b", names, keys))
    path = next(tmp_path.glob("*.arrow"))
    kept = path.read_bytes()
    assert cache.put("a", "b", other)  # the same key, other bytes: that table, not the one decoded before
    _assert_same(other, cache.get("a", "b", names, keys))
    path.write_bytes(kept)
    _assert_same(table, cache.get("a", "b", names, keys))
    raw = bytearray(kept)
    raw[raw.find(np.float64(table.per_query[keys[0]].iloc[0, 0]).tobytes())] ^= 0x10  # same length, one bit
    path.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match="is damaged"):
        assert cache.get("a", "b", names, keys) is None


def test_the_decoded_tables_kept_are_bounded_by_their_bytes(ds, pipes, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import cachetools

    from kolm_search.evaluation import table_cache

    table = _exp(pipes, ds, None).run()
    cache, names, keys = TableCache(tmp_path), list(pipes), [*table.per_query]
    for room, kept in ((1_000, 0), (10**9, 2)):
        memo: cachetools.LRUCache[Any, Any] = cachetools.LRUCache(room, getsizeof=lambda e: e.data.size)
        monkeypatch.setattr(table_cache, "_DECODED", memo)
        assert cache.put("a", "b", table) and cache.put("c", "d", table)
        _assert_same(table, cache.get("a", "b", names, keys))
        _assert_same(table, cache.get("c", "d", names, keys))
        assert len(memo) == kept


@pytest.mark.parametrize("column", ["mean", "wins", "significant"])
def test_a_write_through_a_column_array_does_not_reach_a_later_read(  # type: ignore[no-untyped-def]
        ds, pipes, tmp_path: Path, column: str) -> None:
    """``table[c].array`` is the column's own numpy buffer (pandas' copy on write does not see a
    write through it): a table read again from bytes decoded before still has its own."""
    table = _exp(pipes, ds, tmp_path).run()
    first = _exp(pipes, ds, tmp_path).run()
    values = first[column].array
    values[0] = values[1] if values[0] != values[1] else (values[0] + 1 if column != "significant" else not values[0])
    np.asarray(first["delta"].array)[1] = -3.0
    _assert_same(table, _exp(pipes, ds, tmp_path).run())


def test_a_table_kept_when_stored_holds_no_more_memory_than_its_bytes(ds, pipes, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The table ``put`` keeps (decoded from the bytes it wrote) is counted by those bytes: it
    holds no more (not the grown buffer of the writer, up to twice its size)."""
    import gc
    import tracemalloc

    import pyarrow as pa

    from kolm_search.evaluation import table_cache
    from kolm_search.evaluation.report import ComparisonTable

    table = _exp(pipes, ds, None).run()
    names, n = list(pipes), 150_000
    index = pd.Index([f"q{i}" for i in range(n)], name="qid")
    rng = np.random.default_rng(0)
    big = ComparisonTable(table.copy())
    big.attrs.update(table.attrs)
    big.per_query = {m: pd.DataFrame(rng.random((n, len(names))), index=index, columns=names) for m in table.per_query}
    big.curves = table.curves
    cache = TableCache(tmp_path)
    table_cache.clear_decoded()
    gc.collect()
    tracemalloc.start()
    try:
        arrow, python = pa.total_allocated_bytes(), tracemalloc.get_traced_memory()[0]
        assert cache.put("a", "b", big)
        gc.collect()
        held = pa.total_allocated_bytes() - arrow + tracemalloc.get_traced_memory()[0] - python
    finally:
        tracemalloc.stop()
    counted = sum(entry.data.size for entry in table_cache._DECODED.values())
    assert counted == (tmp_path / next(tmp_path.glob("*.arrow")).name).stat().st_size
    assert held <= 1.1 * counted + 2**20
    _assert_same(big, cache.get("a", "b", names, [*table.per_query]))


@pytest.mark.parametrize("names", [("recall", "x"), ("x", "recall"), ("qid", "0"), ("1", "0")])
def test_runs_named_as_the_stored_columns_keep_their_table(ds, pipes, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           names: tuple[str, str]) -> None:
    """A pipeline named ``recall`` (the curves' index) or like a stored column's position is
    stored and read back as the very table (it was once refused: the curves' ``recall`` twice)."""
    chosen = dict(zip(names, [pipes["prior0.1"], pipes["prior0.3"]], strict=True))
    first = _exp(chosen, ds, tmp_path, baseline=None)
    table = first.run()
    assert first.table_cache is not None and first.table_cache.writes == 1
    assert list(table.curves.columns) == list(names)
    again = _exp(chosen, ds, tmp_path, baseline=None)
    cached = again.run()
    assert again.table_cache is not None and again.table_cache.reads == 1
    _assert_same(table, cached)
