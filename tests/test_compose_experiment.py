"""Experiments that share work (issue 27, item 4): five rerankers over one BM25 first stage run
BM25 once; a second experiment over the same cache runs no stage; a changed parameter runs only
what it changes; a damaged cache file is recomputed with a warning. Oracle: each pipeline run
on its own, outside any experiment."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, Experiment, KolmTypeError, KolmValueError, compare
from kolm_search.adapters import MMRReranker
from kolm_search.compose import RerankerStage, StageCache
from tests.fakes import FingerprintedEmbedder, judged_cranfield


class Counted(BM25Retriever):
    """BM25 counting its kernel calls (every batch search goes through ``retrieve_batch``)."""

    calls = 0

    def retrieve_batch(self, batch: Any) -> Any:
        type(self).calls += 1
        return super().retrieve_batch(batch)


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    return judged_cranfield(25)


def _pipelines(corpus: pd.DataFrame, lambdas: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)) -> dict[str, Any]:
    first = Counted(corpus) % 30
    emb = FingerprintedEmbedder()
    return {f"mmr{lam}": first >> MMRReranker(emb, lambda_=lam) for lam in lambdas}


def _experiment(pipes: dict[str, Any], ds: Any, cache: Path | None = None) -> Experiment:
    return Experiment(pipes, ds, ["ndcg@10"], limit=20, progress=False, cache_dir=cache, drop_self_hits=False)


def _first_stage_runs_once(pipes: dict, ds) -> Experiment:  # type: ignore[no-untyped-def]
    """An experiment of ``pipes`` calls the counted BM25 once, and each run equals the pipeline's own."""
    Counted.calls = 0
    exp = _experiment(pipes, ds)
    exp.run_pipelines()
    assert Counted.calls == 1
    queries = ds.judged_queries()
    for name, pipe in pipes.items():
        pd.testing.assert_frame_equal(exp.runs[name], pipe(queries, limit=20))
    return exp


def test_five_rerankers_run_bm25_once_and_equal_their_own_runs(ds) -> None:  # type: ignore[no-untyped-def]
    pipes = _pipelines(ds.corpus)
    exp = _first_stage_runs_once(pipes, ds)
    assert Counted.calls == 1 + len(pipes)  # alone, each pipeline runs its own BM25
    assert len(set(map(tuple, (exp.runs[n]["doc_id"] for n in pipes)))) > 1  # the rerankers differ


def test_second_experiment_over_the_cache_runs_nothing(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = _experiment(_pipelines(ds.corpus), ds, tmp_path)
    first.run_pipelines()
    Counted.calls = 0
    again = _experiment(_pipelines(ds.corpus), ds, tmp_path)  # new objects, equal configuration
    again.run_pipelines()
    assert Counted.calls == 0 and not again.shared.computed
    for name in first.runs:
        pd.testing.assert_frame_equal(again.runs[name], first.runs[name])
    # one changed parameter: only that reranker runs, BM25 is read from the cache
    changed = _experiment(_pipelines(ds.corpus, (0.1, 0.3, 0.5, 0.7, 0.95)), ds, tmp_path)
    changed.run_pipelines()
    assert Counted.calls == 0
    assert sum(changed.shared.computed.values()) == 2  # the new ``>>`` node and its reranker
    # a changed index (another k1) runs BM25 again, once
    other = {n: p.set_params(left__stage__k1=1.2) for n, p in _pipelines(ds.corpus).items()}
    _experiment(other, ds, tmp_path).run_pipelines()
    assert Counted.calls == 1


def test_a_damaged_cache_file_is_recomputed_with_a_warning(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipes = dict(list(_pipelines(ds.corpus).items())[:1])
    exp = _experiment(pipes, ds, tmp_path)
    exp.run_pipelines()
    files = sorted((tmp_path / "stages").glob("*.parquet"))
    assert files
    files += sorted((tmp_path / "runs").glob("*.arrow"))  # the run read whole, damaged too (else it is used)
    for i, path in enumerate(files):  # truncated or emptied (single flipped bytes: the unit test below)
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2] if i % 2 == 0 else b"")
    Counted.calls = 0
    again = _experiment(dict(list(_pipelines(ds.corpus).items())[:1]), ds, tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again.run_pipelines()
    assert any("damaged" in str(w.message) for w in seen)
    assert Counted.calls == 1
    name = next(iter(pipes))
    pd.testing.assert_frame_equal(again.runs[name], exp.runs[name])
    assert isinstance(again.shared.cache, StageCache) and again.shared.cache.damaged >= 1
    third = _experiment(dict(list(_pipelines(ds.corpus).items())[:1]), ds, tmp_path)  # the files were replaced
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        third.run_pipelines()
    assert Counted.calls == 1 and not third.shared.computed


def test_experiment_refuses_a_reranker_as_a_pipeline(ds) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KolmValueError, match="re-ranks"):
        _experiment({"r": MMRReranker(FingerprintedEmbedder())}, ds)


@pytest.mark.parametrize("pipelines", [[0], (0,), "bm25"])
def test_experiment_refuses_pipelines_that_are_not_named(ds, pipelines: Any) -> None:  # type: ignore[no-untyped-def]
    """Pipelines given as a list (or a tuple, or a string) instead of a dict by name: a
    ``KolmTypeError`` saying what is taken, not an ``AttributeError`` from inside."""
    bm25 = BM25Retriever(ds.corpus)
    given = [bm25] if isinstance(pipelines, list) else (bm25,) if isinstance(pipelines, tuple) else pipelines
    with pytest.raises(KolmTypeError, match="dict"):
        Experiment(given, ds, ["ndcg@10"], progress=False)


def test_stage_cache_round_trips_and_refuses_another_entry(tmp_path: Path) -> None:
    from kolm_search import CandidateFrame

    cache = StageCache(tmp_path)
    frame = CandidateFrame.from_ptr([0, 2, 2, 3], [4, 1, 7], [2.5, 1.0, 0.5])
    frame = CandidateFrame(query=frame.query, doc=frame.doc, score=frame.score, rank=frame.rank, n_queries=3,
                           features=np.arange(6, dtype=np.float64).reshape(3, 2))
    cache.put("stage-a", "input-1", frame)
    back = cache.get("stage-a", "input-1", 3)
    assert back is not None
    for name in ("query", "doc", "score", "rank", "features"):
        np.testing.assert_array_equal(getattr(back, name), getattr(frame, name))
    assert cache.get("stage-a", "input-2", 3) is None  # no file: not a warning
    # another entry's file where this one's should be: its metadata names the other key
    cache.file_for("stage-b", "input-1").write_bytes(cache.file_for("stage-a", "input-1").read_bytes())
    with pytest.warns(RuntimeWarning, match="damaged.*'stage' is 'stage-a'"):
        assert cache.get("stage-b", "input-1", 3) is None
    with pytest.warns(RuntimeWarning, match="n_queries"):
        assert cache.get("stage-a", "input-1", 4) is None
    assert cache.damaged == 2 and cache.reads == 1
    # any flipped byte: the entry reads back equal, or is refused with a warning; never different
    path = cache.file_for("stage-a", "input-1")
    good = path.read_bytes()
    rng = np.random.default_rng(0)
    for j in rng.choice(len(good), size=40, replace=False):
        raw = bytearray(good)
        raw[int(j)] ^= 0xFF
        path.write_bytes(bytes(raw))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = cache.get("stage-a", "input-1", 3)
        if got is None:
            assert any("damaged" in str(w.message) for w in seen)
        else:
            for name in ("query", "doc", "score", "rank", "features"):
                np.testing.assert_array_equal(getattr(got, name), getattr(frame, name))


def test_one_metric_given_as_a_string_is_that_metric(ds) -> None:  # type: ignore[no-untyped-def]
    """``metrics="ndcg@10"`` as ``compare`` takes it (was: split into its letters, 'unknown metric n')."""
    bm = BM25Retriever(ds.corpus)
    pipes = {"a": bm % 10, "b": bm % 20}
    exp = Experiment(pipes, ds, "ndcg@10", limit=20, progress=False, drop_self_hits=False)
    table = exp.run()
    q = ds.judged_queries()
    oracle = compare({n: s(q, limit=20) for n, s in pipes.items()}, ds.qrels, "ndcg@10", drop_self_hits=False)
    pd.testing.assert_frame_equal(table, oracle)
    assert list(exp.per_query()) == ["ndcg@10"]


def test_plot_draws_pipelines_whose_names_are_not_text(ds) -> None:  # type: ignore[no-untyped-def]
    """Pipelines named ``1`` and ``2`` (``compare`` keeps names as given): plot's pairs are those
    names (was: KeyError '2', looked up as text)."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    bm = BM25Retriever(ds.corpus)
    exp = Experiment({1: bm % 10, 2: bm % 5 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)}, ds, ["ndcg@10"], limit=20,
                     progress=False, drop_self_hits=False)
    fig = exp.plot()
    assert [ax.get_title().split(",")[0] for ax in fig.axes[1:2]] == ["ndcg@10: 2 - 1"]


class Failing(RerankerStage):
    def stage_params(self) -> dict[str, Any]:
        return {}

    def transform(self, batch: Any, candidates: Any) -> Any:
        raise RuntimeError("the model fell over")


def test_a_failing_pipeline_is_named_and_the_others_work_is_kept(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A pipeline raising midway: the error says which pipeline of the experiment failed (was:
    only the stage's repr), and a rerun without it reads the run made before the failure."""
    bm = BM25Retriever(ds.corpus) % 10
    pipes = {"a": bm >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5), "broken": bm >> Failing(),
             "c": bm >> MMRReranker(FingerprintedEmbedder(), lambda_=0.9)}
    with pytest.raises(Exception, match="the model fell over") as caught:
        _experiment(pipes, ds, tmp_path).run()
    assert any("'broken'" in note for note in getattr(caught.value, "__notes__", []))
    again = _experiment({n: pipes[n] for n in ("a", "c")}, ds, tmp_path)
    again.run_pipelines()
    assert again.run_cache is not None and again.run_cache.reads == 1  # 'a', made before 'broken' failed
    fresh = _experiment({n: pipes[n] for n in ("a", "c")}, ds)
    for name in ("a", "c"):
        pd.testing.assert_frame_equal(again.runs[name], fresh.run_pipelines()[name], check_exact=True)


def test_a_retriever_alone_shares_its_run_with_the_pipelines_it_starts(ds) -> None:  # type: ignore[no-untyped-def]
    # ``bm25`` beside ``bm25 >> mmr``: the lone retriever was called outside the sharing (twice)
    bm25 = Counted(ds.corpus)
    pipes = {"bm25": bm25, "mmr": bm25 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)}
    _first_stage_runs_once(pipes, ds)


def test_a_changed_k1_runs_bm25_and_what_follows_it_once_each_and_nothing_else(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kolm_search import DenseRetriever

    def pipes(k1: float) -> dict[str, Any]:
        out = _pipelines(ds.corpus)
        for p in out.values():
            p.set_params(left__stage__k1=k1)
        return {**out, "dense": DenseRetriever(ds.corpus, FingerprintedEmbedder()) % 30 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)}

    _experiment(pipes(1.5), ds, tmp_path).run_pipelines()
    Counted.calls = 0
    changed = _experiment(pipes(1.2), ds, tmp_path)
    changed.run_pipelines()
    assert Counted.calls == 1
    computed = changed.shared.computed
    assert len(computed) == 12 and set(computed.values()) == {1}  # BM25, its cutoff, 5 rerankers, 5 '>>'
    assert all("k1=1.2" in fp for fp in computed if "MMRReranker(" not in fp or fp.startswith("Then("))
    assert not any("DenseRetriever(" in fp for fp in computed)  # the dense pipeline read back whole
    queries = ds.judged_queries()
    for name, pipe in pipes(1.2).items():
        pd.testing.assert_frame_equal(changed.runs[name], pipe(queries, limit=20))


def test_dense_indexes_of_other_vectors_are_other_stages(ds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the fingerprint held the embedder, not the vectors: given embeddings= (or loaded files) of
    # another model shared the first index's run in an experiment and in the caches
    from kolm_search import DenseRetriever

    emb = FingerprintedEmbedder()
    computed = DenseRetriever(ds.corpus, emb)
    other = DenseRetriever(ds.corpus, emb, embeddings=np.random.default_rng(0).standard_normal(
        computed.embeddings.shape).astype(np.float32))
    assert computed.fingerprint() != other.fingerprint()
    computed.save(tmp_path / "dense")
    assert DenseRetriever.load(tmp_path / "dense", emb).fingerprint() == computed.fingerprint()  # the same vectors
    queries = ds.judged_queries()
    pipes = {"computed": computed % 10, "other": other % 10}
    for cache in (None, tmp_path / "cache", tmp_path / "cache"):  # shared in memory; written; read back
        exp = _experiment(pipes, ds, cache)
        exp.run_pipelines()
        for name, pipe in pipes.items():
            pd.testing.assert_frame_equal(exp.runs[name], pipe(queries, limit=20))
    empty = DenseRetriever(ds.corpus.iloc[:0], emb)
    assert empty.fingerprint() != computed.fingerprint()


@pytest.mark.parametrize("column", ["rank", "qid"])
def test_a_write_into_one_runs_column_reaches_no_other_run(ds, column: str) -> None:  # type: ignore[no-untyped-def]
    from tests.fakes import Prior

    first = BM25Retriever(ds.corpus) % 30
    pipes = {f"prior{w}": first >> Prior(w, modulus=7, rounded=False) for w in (0.1, 0.2)}
    exp = _experiment(pipes, ds)
    exp.run_pipelines()
    a, b = (exp.runs[n] for n in pipes)
    before = b.copy(deep=True)
    assert a[column].iloc[0] == b[column].iloc[0]  # the first stage's ranks and qids: alike in both runs
    a[column].array[1] = a[column].iloc[-1]  # through the block's own array, which copy on write does not watch
    if column == "rank":
        np.asarray(a[column].array)[2] = 998
    a.loc[a.index[0], column] = a[column].iloc[1]
    pd.testing.assert_frame_equal(b, before)
    pd.testing.assert_frame_equal(exp.runs[list(pipes)[1]], before)


class _RescoresInPlace:
    """A user reranker that writes into the documents it is given (its score, text and metadata)
    before returning them re-ordered."""

    def rerank(self, docs: list[Any], context: Any) -> list[Any]:
        for d in docs:
            d.score = -d.score
            d.content = "rescored"
            d.metadata = {**(d.metadata or {}), "seen": True}
        return sorted(docs, key=lambda d: -d.score)


class _ByScore:
    """A user reranker ordering the documents by the score they come with."""

    def rerank(self, docs: list[Any], context: Any) -> list[Any]:
        assert all(d.content != "rescored" and not (d.metadata or {}).get("seen") for d in docs), \
            "given documents another reranker wrote into"
        return sorted(docs, key=lambda d: -d.score)


def test_a_reranker_writing_into_its_documents_reaches_no_other_reranker(ds) -> None:  # type: ignore[no-untyped-def]
    # the rerankers of one first stage are given the candidates' documents made once: each its own copies
    from kolm_search import as_stage

    first = BM25Retriever(ds.corpus) % 30
    pipes = {"writes": first >> as_stage(_RescoresInPlace()), "reads": first >> as_stage(_ByScore())}
    exp = _experiment(pipes, ds)
    exp.run_pipelines()
    queries = ds.judged_queries()
    pd.testing.assert_frame_equal(exp.runs["reads"], pipes["reads"](queries, limit=20))
    pd.testing.assert_frame_equal(exp.runs["writes"], pipes["writes"](queries, limit=20))


class _NarrowsItsContext:
    """A user reranker that writes into the context it is given (its filters and plan metadata)."""

    def rerank(self, docs: list[Any], context: Any) -> list[Any]:
        context.request.filters["id"] = docs[0].id if docs else "none"
        context.plan.metadata["seen"] = True
        return docs


def test_a_reranker_writing_into_its_context_reaches_no_other_pipeline(ds) -> None:  # type: ignore[no-untyped-def]
    # every stage of an experiment is given one batch: a port's context holds its own filters and metadata
    from kolm_search import as_stage

    pipes = {"writes": BM25Retriever(ds.corpus) % 10 >> as_stage(_NarrowsItsContext()),
             "later": BM25Retriever(ds.corpus, k1=1.0) % 10}
    exp = _experiment(pipes, ds)
    exp.run_pipelines()
    queries = ds.judged_queries()
    pd.testing.assert_frame_equal(exp.runs["later"], pipes["later"](queries, limit=20))
    pd.testing.assert_frame_equal(exp.runs["writes"], pipes["writes"](queries, limit=20))


class InPlace(RerankerStage):
    """A user reranker that writes into the frame it is given (``candidates.score *= ...``) or
    into the batch's embeddings, as a careless one would."""

    def __init__(self, what: str) -> None:
        self.what = what

    def stage_params(self) -> dict[str, Any]:
        return {"what": self.what}

    def transform(self, batch: Any, candidates: Any) -> Any:
        if self.what == "embeddings":
            batch.embeddings /= 2.0
        else:
            getattr(candidates, self.what)[:] = 0
        return candidates


@pytest.mark.parametrize("what", ["score", "doc", "rank", "query"])
def test_a_stage_writing_into_the_frame_it_is_given_is_named_and_reaches_no_other_pipeline(
        ds, what: str) -> None:  # type: ignore[no-untyped-def]
    """The frames a stage is given are shared (one BM25 output for every reranker of an
    experiment): a write into one fails, naming the stage, instead of changing what the other
    pipelines are given."""
    from kolm_search import SearchError

    bm = BM25Retriever(ds.corpus) % 10
    alone = _experiment({"plain": bm >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)}, ds).run_pipelines()["plain"]
    exp = _experiment({"careless": bm >> InPlace(what), "plain": bm >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5)}, ds)
    with pytest.raises(SearchError, match=r"InPlace.*read-only"):
        exp.run_pipelines()
    exp.pipelines.pop("careless")
    pd.testing.assert_frame_equal(exp.run_pipelines()["plain"], alone, check_exact=True)


def test_a_stage_writing_into_the_batchs_embeddings_is_named(ds) -> None:  # type: ignore[no-untyped-def]
    from kolm_search import SearchError
    from kolm_search.engine.candidate_frame import QueryBatch

    batch = QueryBatch(texts=["a", "b"], owner=np.array([0, 1]), n_queries=2, limit=5, filters=[{}, {}],
                       embeddings=np.ones((2, 3), np.float32))
    assert not batch.embeddings.flags.writeable and not batch.owner.flags.writeable
    stage = BM25Retriever(ds.corpus) % 5 >> InPlace("embeddings")
    with pytest.raises(SearchError, match=r"InPlace.*read-only"):
        stage.transform(batch, None)
