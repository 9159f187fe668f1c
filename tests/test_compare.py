"""compare, paired tests (against scipy), corrections, Experiment, optimize_fusion, CLI."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from kolm_search import Experiment, KolmValueError, compare, evaluate, fuse, optimize_fusion, presets
from kolm_search.cli import main
from kolm_search.evaluation.stats import correct as _correct
from kolm_search.evaluation.stats import paired_test
from kolm_search.io import load_beir, read_run, write_qrels, write_run


def test_paired_tests_against_scipy_and_reproducible() -> None:
    rng = np.random.default_rng(3)
    a = rng.random(60)
    b = a + rng.normal(0.05, 0.1, 60)
    assert paired_test(a, b, "t") == pytest.approx(stats.ttest_rel(b, a).pvalue)
    assert paired_test(a, b, "wilcoxon") == pytest.approx(stats.wilcoxon(b, a).pvalue)
    for test in ("fisher", "bootstrap"):
        p1 = paired_test(a, b, test, seed=42, n_resamples=3000)
        assert p1 == paired_test(a, b, test, seed=42, n_resamples=3000)  # bit for bit
        assert 0 < p1 < 0.05
    same = paired_test(a, a, "fisher")
    assert same == 1.0
    # a null difference gives a large p-value under the randomisation test
    noise = a + rng.normal(0, 0.1, 60)
    noise = noise - (noise - a).mean()
    assert paired_test(a, noise, "fisher", seed=1, n_resamples=2000) > 0.5


def test_fisher_matches_exact_enumeration_on_small_sample() -> None:
    d = np.array([0.3, -0.1, 0.2, 0.25, 0.05])
    import itertools

    obs = abs(d.mean())
    exact = np.mean([abs((np.array(s) * d).mean()) >= obs - 1e-15 for s in itertools.product([-1, 1], repeat=5)])
    p = paired_test(np.zeros(5), d, "fisher", seed=0, n_resamples=40_000)
    assert p == pytest.approx(exact, abs=0.01)


def test_corrections() -> None:
    p = np.array([0.01, 0.04, 0.03])
    np.testing.assert_allclose(_correct(p, "bonferroni"), [0.03, 0.12, 0.09])
    np.testing.assert_allclose(_correct(p, "holm"), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(_correct(p, "none"), p)
    with pytest.raises(KolmValueError):
        _correct(p, "sidak")


@pytest.fixture(scope="module")
def cran_runs(cranfield: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    bm25 = presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"], limit=100).run
    title_only = presets.bm25(cranfield["corpus"], fields=("title",)).search_batch(cranfield["queries"], limit=100).run
    return {"bm25": bm25, "title": title_only}


def test_compare_table(cran_runs: dict[str, pd.DataFrame], cranfield: dict[str, pd.DataFrame]) -> None:
    table = compare(cran_runs, cranfield["qrels"], ["ndcg@10", "map"], test="t")
    assert list(table.columns) == ["run", "metric", "mean", "delta", "p_value", "p_adjusted", "significant", "wins", "ties",
                                   "losses", "baseline", "ci_low", "ci_high", "effect_size"]
    row = table[(table.run == "title") & (table.metric == "ndcg@10")].iloc[0]
    base = evaluate(cran_runs["bm25"], cranfield["qrels"], ["ndcg@10"])["ndcg@10"]
    other = evaluate(cran_runs["title"], cranfield["qrels"], ["ndcg@10"])["ndcg@10"]
    assert row["mean"] == pytest.approx(other) and row.delta == pytest.approx(other - base)
    assert row.wins + row.ties + row.losses == 225 and row.significant
    with pytest.raises(KolmValueError, match="baseline"):
        compare(cran_runs, cranfield["qrels"], baseline="nope")


def test_experiment_caches_runs(cranfield: dict[str, pd.DataFrame], cranfield_dir: Path, tmp_path: Path) -> None:
    ds = load_beir(cranfield_dir)
    calls = []

    class Counting:
        def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
            self.inner = inner

        def search_batch(self, queries, **kw):  # type: ignore[no-untyped-def]
            calls.append(len(queries))
            return self.inner.search_batch(queries, **kw)

    pipes = {"bm25": Counting(presets.bm25(ds.corpus)), "bm25-title": Counting(presets.bm25(ds.corpus, fields=("title",)))}
    exp = Experiment(pipes, ds, ["ndcg@10"], cache_dir=tmp_path, progress=False)
    first = exp.run()
    n_calls = len(calls)
    again = Experiment(pipes, ds, ["ndcg@10"], cache_dir=tmp_path, progress=False).run()
    assert len(calls) == n_calls  # the second experiment searched nothing
    pd.testing.assert_frame_equal(first, again)
    assert first.loc[first.run == "bm25", "mean"].iloc[0] == pytest.approx(0.373, abs=0.002)


def test_experiment_plot(cranfield_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    ds = load_beir(cranfield_dir)
    exp = Experiment({"a": presets.bm25(ds.corpus), "b": presets.bm25(ds.corpus, k1=0.9)}, ds, ["ndcg@10", "map"], progress=False)
    fig = exp.plot()  # bars per metric, a per-query row per run against the baseline, the precision-recall curves
    assert len(fig.axes) == 2 + 2 + 1
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("ndcg@10: mean, 95% interval") and "b - a, per query" in titles[2]
    assert titles[-1].startswith("precision-recall") and len(fig.axes[-1].lines) == 2


def test_optimize_fusion_finds_the_best_grid_point(cran_runs: dict[str, pd.DataFrame], cranfield: dict[str, pd.DataFrame]) -> None:
    qrels = cranfield["qrels"]
    train = sorted(set(qrels.qid))[:120]
    result = optimize_fusion(cran_runs, qrels, "ndcg@10", grid={"k": [5, 60], "weights": [[1, 0], [0.5, 0.5], [0.8, 0.2]]}, queries=train)
    trials = result["trials"]
    assert len(trials) == 6 and trials["ndcg@10"].is_monotonic_decreasing
    # brute force the winner
    best = max(((k, w) for k in (5, 60) for w in ([1, 0], [0.5, 0.5], [0.8, 0.2])),
               key=lambda kw: evaluate(fuse([r[r.qid.isin(train)] for r in cran_runs.values()], k=kw[0], weights=kw[1]),
                                       qrels[qrels.qid.isin(train)], ["ndcg@10"])["ndcg@10"])
    assert (result["k"], list(result["weights"].values())) == (best[0], pytest.approx(best[1]))
    with pytest.raises(KolmValueError, match="two runs"):
        optimize_fusion({"a": cran_runs["bm25"]}, qrels)


def test_cli_eval_fuse_compare(cranfield_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bm25.trec"
    assert main(["eval", str(cranfield_dir), "--pipeline", "bm25", "--metrics", "ndcg@10,recall@100", "--run-out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "ndcg@10" in printed and "0.3730" in printed
    run = read_run(out)
    assert run.qid.nunique() == 225
    write_run(run.assign(score=-run["rank"]), tmp_path / "flat.trec")
    assert main(["fuse", str(out), str(tmp_path / "flat.trec"), "--k", "10", "-o", str(tmp_path / "f.trec")]) == 0
    fused = read_run(tmp_path / "f.trec")
    expected = fuse([read_run(out), read_run(tmp_path / "flat.trec")], k=10)
    np.testing.assert_allclose(fused.score.to_numpy(), expected.score.to_numpy())
    ds = load_beir(cranfield_dir)
    write_qrels(ds.qrels, tmp_path / "qrels.txt")
    assert main(["compare", str(out), str(tmp_path / "f.trec"), "--qrels", str(tmp_path / "qrels.txt"), "--test", "fisher"]) == 0
    assert "f.trec" in capsys.readouterr().out


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "nothing")]) == 1
    assert "error" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "--metrics", "ndcg@x"]) == 1
    (tmp_path / "bad.trec").write_text("garbage line\n")
    assert main(["fuse", str(tmp_path / "bad.trec"), "-o", str(tmp_path / "o.trec")]) == 1
    assert "bad.trec:1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    with pytest.raises(SystemExit) as info:
        main(["eval"])
    assert info.value.code == 2


@pytest.mark.parametrize("damage", ["truncated", "foreign", "bit-flipped", "empty", "symlink loop", "another's",
                                    "rewritten"])
def test_a_damaged_client_run_file_is_searched_again_with_a_warning(cranfield_dir: Path, tmp_path: Path,
                                                                    damage: str) -> None:
    """A client's cached run (``<dataset>__<pipeline>__k<limit>__q<digest>.parquet``) that does
    not read back whole (cut short, another parquet file, flipped bits, no bytes, a link in a
    loop, another pipeline's run file copied over it) is warned about naming it, searched again
    (oracle: an experiment without a cache) and replaced; it is written all or nothing."""
    ds = load_beir(cranfield_dir)
    pipes = {"bm25": presets.bm25(ds.corpus), "title": presets.bm25(ds.corpus, fields=("title",))}
    oracle = Experiment(pipes, ds, ["ndcg@10", "map"], progress=False).run()
    Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
    (path,) = tmp_path.glob("*__bm25__*.parquet")
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "foreign":
        pd.DataFrame({"x": [1, 2]}).to_parquet(path)
    elif damage == "bit-flipped":
        flipped = bytearray(data)
        flipped[len(data) // 3] ^= 0x08  # inside the column pages
        path.write_bytes(bytes(flipped))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "symlink loop":
        path.unlink()
        path.symlink_to(path)
    elif damage == "rewritten":  # a well-formed file, its metadata kept, one score changed (no page checksums)
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        score = table.column("score").to_numpy().copy()
        score[0] += 1.0
        table = table.set_column(table.column_names.index("score"), "score", pa.array(score))
        pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)
    else:
        (other,) = tmp_path.glob("*__title__*.parquet")
        path.write_bytes(other.read_bytes())
    with pytest.warns(RuntimeWarning, match=f"run cache file .*{path.name}.* is damaged"):
        table = Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
    pd.testing.assert_frame_equal(table, oracle)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
    pd.testing.assert_frame_equal(again, oracle)
    assert path.is_file() and not list(tmp_path.glob(".*"))  # replaced, no temporary file left


def test_a_folder_where_a_client_run_file_goes_is_searched_past_with_a_warning(cranfield_dir: Path,
                                                                              tmp_path: Path) -> None:
    """A folder standing where a client's run file goes (an empty one, or one holding a parquet
    file that reads as a run) is never read as the run: the client is searched (oracle: an
    experiment without a cache) with a ``RuntimeWarning`` naming the folder, which is left as it
    is, as the stage cache does (``CacheFolder.writable``); the experiment does not fail."""
    ds = load_beir(cranfield_dir)
    pipes = {"bm25": presets.bm25(ds.corpus), "title": presets.bm25(ds.corpus, fields=("title",))}
    oracle = Experiment(pipes, ds, ["ndcg@10", "map"], progress=False).run()
    Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
    (path,) = tmp_path.glob("*__bm25__*.parquet")
    (other,) = tmp_path.glob("*__title__*.parquet")
    data = other.read_bytes()
    path.unlink()
    path.mkdir()
    for filled in (False, True):
        if filled:  # a parquet file inside: read as a dataset, it would be another pipeline's run
            (path / "part-0.parquet").write_bytes(data)
        with pytest.warns(RuntimeWarning, match=f"{path.name}.* is a folder"):
            table = Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
        pd.testing.assert_frame_equal(table, oracle)
        assert path.is_dir()


@pytest.mark.parametrize("edit", ["queries", "qrels"])
def test_a_client_run_is_searched_again_when_the_judged_queries_change(cranfield_dir: Path, tmp_path: Path,
                                                                       edit: str) -> None:
    """A client's cached run is keyed by the judged queries it was searched for too (not the
    dataset's and pipeline's names alone): queries edited in place, or a query judged anew, give
    a new run, not the stale one (oracle: an experiment without a cache)."""
    ds = load_beir(cranfield_dir)
    first = ds.qrels["qid"].iloc[0]
    moved = ds.qrels[ds.qrels["qid"] == first]
    ds.qrels = ds.qrels[ds.qrels["qid"] != first].reset_index(drop=True)
    pipes = {"bm25": presets.bm25(ds.corpus)}
    Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
    if edit == "queries":
        ds.queries.loc[ds.queries.index[:50], "query"] = "boundary layer heat transfer"
    else:
        for row in moved.itertuples(index=False):
            ds.qrels.loc[len(ds.qrels)] = list(row)
    table = Experiment(pipes, ds, ["ndcg@10", "map"], cache_dir=tmp_path, progress=False).run()
    pd.testing.assert_frame_equal(table, Experiment(pipes, ds, ["ndcg@10", "map"], progress=False).run())


@pytest.mark.parametrize("bad", [{"metrics": ["nosuch"]}, {"metrics": ["ndcg@0"]}, {"baseline": "zz"}, {"test": "nope"},
                                 {"correction": "nope"}, {"ci": "nope"}, {"seed": "x"}, {"seed": -1},
                                 {"test": "tukey", "correction": "holm"}])
def test_an_experiment_refuses_bad_settings_before_searching(cranfield_dir: Path, bad: dict[str, Any]) -> None:
    """A metric, baseline, test, correction, interval or seed that ``compare`` would refuse is a
    KolmValueError when the experiment is made, not after every pipeline has searched (a seed
    that is no integer was a raw TypeError)."""
    ds = load_beir(cranfield_dir)
    calls: list[int] = []

    class Counting:
        def search_batch(self, queries, **kw):  # type: ignore[no-untyped-def]
            calls.append(len(queries))
            raise AssertionError("searched")

    kw = {"metrics": ["ndcg@10"], **bad}
    with pytest.raises(KolmValueError):
        Experiment({"a": Counting(), "b": Counting()}, ds, progress=False, **kw).run()
    assert not calls


def test_client_names_alike_once_made_file_names_keep_their_own_runs(cranfield_dir: Path, tmp_path: Path) -> None:
    """Two clients whose names differ only in characters a file name cannot hold ("bm25 title"
    and "bm25_title") are cached in two files, each read back as its own run (was: one file,
    the second pipeline reading the first's run; oracle: an experiment without a cache)."""
    ds = load_beir(cranfield_dir)
    pipes = {"bm25 title": presets.bm25(ds.corpus, fields=("title",)), "bm25_title": presets.bm25(ds.corpus)}
    oracle = Experiment(pipes, ds, ["ndcg@10"], progress=False).run()
    first = Experiment(pipes, ds, ["ndcg@10"], cache_dir=tmp_path, progress=False).run()
    again = Experiment(pipes, ds, ["ndcg@10"], cache_dir=tmp_path, progress=False).run()
    pd.testing.assert_frame_equal(first, oracle)
    pd.testing.assert_frame_equal(again, oracle)
    assert len(list(tmp_path.glob("*.parquet"))) == 2
