"""``Stage``: built-in retrievers and rerankers as stages, ``stage(queries)``, ``as_stage``, a stage
as a ``SearchClient``'s retriever (issue 27, item 1). Oracles: ``search_batch`` of the same
stage, the pipeline's own reranker stage."""

from __future__ import annotations

import asyncio

import numpy as np
import pandas as pd
import pytest

from kolm_search import (
    BM25Retriever,
    CandidateFrame,
    DefaultQueryPlanner,
    DenseRetriever,
    Fuse,
    KolmError,
    KolmTypeError,
    SearchClient,
    SearchError,
    Stage,
    as_stage,
)
from kolm_search.adapters import MMRReranker
from kolm_search.compose import RerankerStage, ServedByRunner
from kolm_search.contract.ports import BatchRetriever, implements
from tests.fakes import CORPUS, AsyncListRetriever, BatchHashEmbedder, ListRetriever


@pytest.fixture(scope="module")
def small(cranfield):  # type: ignore[no-untyped-def]
    corpus = cranfield["corpus"].iloc[:400].reset_index(drop=True)
    queries = cranfield["queries"].iloc[:40].reset_index(drop=True)
    emb = BatchHashEmbedder()
    return corpus, queries, BM25Retriever(corpus), DenseRetriever(corpus, emb), emb


def _client(retriever, **modules):  # type: ignore[no-untyped-def]
    return SearchClient({"planner": DefaultQueryPlanner(), "retriever": retriever, **modules})


def test_built_ins_are_stages(small) -> None:  # type: ignore[no-untyped-def]
    _, _, bm25, dense, emb = small
    assert isinstance(bm25, Stage) and isinstance(dense, Stage) and bm25.is_source
    mmr = MMRReranker(emb)
    assert isinstance(mmr, RerankerStage) and not mmr.is_source
    assert as_stage(bm25) is bm25


@pytest.mark.parametrize("offset", [0, 3])
def test_call_equals_search_batch(small, offset: int) -> None:  # type: ignore[no-untyped-def]
    _, queries, bm25, _, _ = small
    for stage in (bm25, bm25 % 30, 0.5 * bm25 + bm25):
        run = stage(queries, limit=15, offset=offset)
        ref = _client(stage).search_batch(queries, limit=15, offset=offset).run
        pd.testing.assert_frame_equal(run, ref, check_dtype=False)
        assert list(run.columns) == ["qid", "doc_id", "rank", "score"]
    # a bare string list: positions are the qids
    assert list(bm25(["wing flutter", "heat transfer"], limit=3)["qid"]) == [0, 0, 0, 1, 1, 1]


def test_reranker_stage_equals_the_pipeline_reranker(small) -> None:  # type: ignore[no-untyped-def]
    _, queries, bm25, _, emb = small
    mmr = MMRReranker(emb, lambda_=0.3)
    ours = (bm25 >> mmr)(queries, limit=10)
    ref = _client(bm25, reranker=mmr, embedder=emb).search_batch(queries, limit=10, mode="fulltext").run
    assert (ours["doc_id"].to_numpy() == ref["doc_id"].to_numpy()).all()
    assert not (ours["score"].to_numpy() == ref["score"].to_numpy()).all()  # MMR re-orders, keeping scores
    # the stage's scores follow its order: each query's incoming scores, sorted descending
    expected = ref.groupby("qid", sort=False)["score"].transform(lambda s: np.sort(s.to_numpy())[::-1])
    assert np.allclose(ours["score"], expected)


def test_composed_stage_serves_the_spec_api(small) -> None:  # type: ignore[no-untyped-def]
    _, queries, bm25, dense, emb = small
    pipe = (bm25 % 40) >> MMRReranker(emb, lambda_=0.5)
    client = _client(pipe)
    batch = client.search_batch(queries, limit=8).run
    pd.testing.assert_frame_equal(batch, pipe(queries, limit=8), check_dtype=False)
    single = client.search_sync({"query": queries["query"][0], "limit": 8})
    assert [r.id for r in single.results] == list(batch[batch["qid"] == queries["qid"][0]]["doc_id"])


def test_as_stage_wraps_user_ports(small) -> None:  # type: ignore[no-untyped-def]
    docs = CORPUS[:12]
    table = pd.DataFrame({"id": [d.id for d in CORPUS], "content": [d.content for d in CORPUS]})
    for port in (ListRetriever(docs), AsyncListRetriever(docs)):
        stage = as_stage(port, table=table)
        run = stage(["a", "b"], limit=5)
        assert list(run["doc_id"]) == [d.id for d in docs[:5]] * 2

    class Reverse:
        async def rerank(self, documents, context):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0)
            return documents[::-1]

    pipe = as_stage(ListRetriever(docs), table=table) >> as_stage(Reverse())
    assert list(pipe(["q"], limit=4)["doc_id"]) == [d.id for d in docs[:4][::-1]]
    with pytest.raises(KolmTypeError, match="neither retrieve"):
        as_stage(object())
    with pytest.raises(ValueError, match="needs table="):
        as_stage(ListRetriever(docs))


def _broken_port(table):  # type: ignore[no-untyped-def]
    """A user retriever class over ``table`` whose batch path returns a document code out of it."""

    class Broken:
        def __init__(self) -> None:
            self.table = table

        def retrieve(self, context):  # type: ignore[no-untyped-def]
            return []

        def retrieve_batch(self, batch):  # type: ignore[no-untyped-def]
            return CandidateFrame.from_ptr([0, 1] + [1] * (batch.n_queries - 1), [10**6], [1.0])

        def __repr__(self) -> str:
            return "Broken()"

    return Broken


def test_a_stage_breaking_the_frame_schema_is_a_search_error_naming_it(small) -> None:  # type: ignore[no-untyped-def]
    _, queries, bm25, _, _ = small

    Broken = _broken_port(bm25.table)

    with pytest.raises(SearchError, match=r"document code 1000000") as info:
        (as_stage(Broken()) % 5)(queries, limit=5)
    assert "Broken()" in info.value.stage

    class FloatCodes(Broken):  # document codes as floats: refused, not truncated
        def retrieve_batch(self, batch):  # type: ignore[no-untyped-def]
            n = batch.n_queries
            return CandidateFrame(query=np.arange(n, dtype=np.int32), doc=np.full(n, 1.5), score=np.ones(n),
                                  rank=np.zeros(n, np.int32), n_queries=n)

        def __repr__(self) -> str:
            return "FloatCodes()"

    with pytest.raises(SearchError, match=r"'doc' has dtype float64; it holds integer codes") as info:
        (as_stage(FloatCodes()) % 5)(queries, limit=5)
    assert "FloatCodes()" in info.value.stage
    with pytest.raises(KolmTypeError, match="re-ranks"):
        MMRReranker(BatchHashEmbedder())(["q"])


class _Twice(Stage):
    """A user stage (retrieving, or re-ranking) whose frame holds document code 3 twice for query 0
    (as rows 0 and 2 of its list, or, when ``lists``, once in each of two lists: a stage's output
    is one list per query, and the operators read it so)."""

    def __init__(self, table, source: bool = True, lists: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.table, self.source, self.lists = table, source, lists

    @property
    def is_source(self) -> bool:
        return self.source

    def transform(self, batch, candidates):  # type: ignore[no-untyped-def]
        n = batch.n_queries
        if self.lists:
            return CandidateFrame(query=np.zeros(2, np.int32), doc=np.array([3, 3]), score=np.ones(2),
                                  rank=np.zeros(2, np.int32), n_queries=n, list_id=np.array([0, 1], np.int32))
        return CandidateFrame.from_ptr([0, 3] + [3] * (n - 1), [3, 5, 3], [3.0, 2.0, 1.0])

    def __repr__(self) -> str:
        return "Twice()"


def test_a_user_stage_returning_a_document_twice_for_a_query_is_a_search_error(small) -> None:  # type: ignore[no-untyped-def]
    """A frame holding one document twice in one query's list breaks the schema, also from a
    ``Stage`` subclass (not only through a port): alone it would put the document in the run
    twice (counted twice by a measure), and ``+``, ``|`` or ``^`` would drop or merge an entry
    silently. A ``SearchError`` names the stage, whatever composition holds it, also when the
    two entries carry two ``list_id`` values (a stage returns one list per query: ``a % k``
    would make it one list holding the document twice); a table far larger than the frame is
    checked alike (the kernel's sorting twin)."""
    corpus, queries, bm25, _, _ = small
    twice = _Twice(bm25.table)
    for pipe in (twice, twice % 2, twice + bm25, bm25 ^ twice, Fuse(twice % 5, bm25 % 5), bm25 % 5 >> _Twice(None, False)):
        with pytest.raises(SearchError, match="document code 3 twice") as info:
            pipe(queries, limit=5)
        assert "Twice()" in str(info.value)  # (a Fuse names the child: the composite-retriever stage is its own)
    for pipe in (_Twice(bm25.table, lists=True), _Twice(BM25Retriever(pd.concat([corpus] * 30, ignore_index=True).assign(
            id=lambda f: [f"x{i}" for i in range(len(f))])).table)):
        with pytest.raises(SearchError, match="document code 3 twice") as info:
            pipe(queries, limit=5)
        assert info.value.stage == "Twice()"


class _Port:
    """A user port whose one method runs ``body`` (sync, or async with ``run_async``)."""

    def __init__(self, body, run_async: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.body, self.run_async = body, run_async

    def __repr__(self) -> str:
        return "UserPort()"


class _UserRetriever(_Port):
    def retrieve(self, context):  # type: ignore[no-untyped-def]
        if self.run_async:
            async def later():  # type: ignore[no-untyped-def]
                return self.body(context)
            return later()
        return self.body(context)


class _UserReranker(_Port):
    def rerank(self, documents, context):  # type: ignore[no-untyped-def]
        if self.run_async:
            async def later():  # type: ignore[no-untyped-def]
                return self.body(documents, context)
            return later()
        return self.body(documents, context)


def _fail(*_):  # type: ignore[no-untyped-def]
    raise RuntimeError("backend down")


@pytest.mark.parametrize("run_async", [False, True])
def test_user_ports_that_fail_or_misbehave_are_search_errors_naming_the_stage(small, run_async: bool) -> None:  # type: ignore[no-untyped-def]
    corpus, _, bm25, _, _ = small
    ids = list(corpus["id"].astype(str))

    def doc(i: str, score: float | None = 1.0):  # type: ignore[no-untyped-def]
        from kolm_search import SearchDocument
        return SearchDocument(id=i, content="x", score=score)

    retrievers = {
        "backend down": _fail,
        "returned NoneType|NoneType": lambda c: None,
        "item 0 of type int": lambda c: [1, 2],
        "NaN score": lambda c: [doc(ids[0], float("nan"))],
        f"document {ids[0]!r} twice": lambda c: [doc(ids[0]), doc(ids[1]), doc(ids[0])],
    }
    for pattern, body in retrievers.items():
        stage = as_stage(_UserRetriever(body, run_async), table=corpus)
        for pipe in (stage, stage % 3, Fuse(stage % 3, bm25 % 3)):
            with pytest.raises(SearchError, match=pattern) as info:
                pipe(["wing flutter", "heat"], limit=3)
            assert "UserPort()" in str(info.value)
    rerankers = {"backend down": _fail, "twice": lambda d, c: d + d[:1], "NaN score": lambda d, c: [doc(d[0].id, float("nan"))],
                 "must return a list": lambda d, c: None}
    for pattern, body in rerankers.items():
        with pytest.raises(SearchError, match=pattern) as info:
            (bm25 % 5 >> as_stage(_UserReranker(body, run_async)))(["wing flutter"], limit=5)
        assert "UserPort()" in info.value.stage
        if pattern == "backend down":
            assert isinstance(info.value.cause, RuntimeError)


def test_a_user_stage_called_on_queries_is_checked_and_guarded(small) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, bm25, _, _ = small

    Broken = _broken_port(bm25.table)  # called directly (no operator around it)

    with pytest.raises(SearchError, match=r"document code 1000000") as info:
        as_stage(Broken())(queries, limit=5)
    assert "Broken()" in info.value.stage

    class Twice(Broken):
        def retrieve_batch(self, batch):  # type: ignore[no-untyped-def]
            return CandidateFrame.from_ptr([0, 2] + [2] * (batch.n_queries - 1), [3, 3], [2.0, 1.0])

    with pytest.raises(SearchError, match=r"document code 3 twice") as info:
        as_stage(Twice())(queries, limit=5)
    assert "Broken()" in info.value.stage

    class Batched:  # a batch reranker returning one list for several queries
        def rerank(self, documents, context):  # type: ignore[no-untyped-def]
            return documents

        def rerank_batch(self, items):  # type: ignore[no-untyped-def]
            return [items[0][0]]

        def __repr__(self) -> str:
            return "Batched()"

    with pytest.raises(SearchError, match="one list per query") as info:
        (bm25 % 5 >> as_stage(Batched()))(queries, limit=5)
    assert info.value.stage == "as_stage(Batched())"

    def again(context):  # type: ignore[no-untyped-def]
        return list(looped(["x"]))  # a user retriever calling the stage that holds it

    looped = as_stage(_UserRetriever(again), table=corpus)
    for pipe in (looped, looped % 3):
        with pytest.raises(KolmError, match="cycle"):
            pipe(["wing flutter"], limit=3)


def test_a_user_retriever_as_a_stage_serves_the_spec_api() -> None:
    """``as_stage(port, table=...)`` is a stage, so a client serves it as any stage (search and
    search_batch give the stage's own run)."""
    table = pd.DataFrame({"id": [d.id for d in CORPUS], "content": [d.content for d in CORPUS]})
    for port in (ListRetriever(CORPUS[3:20]), AsyncListRetriever(CORPUS[3:20])):
        stage = as_stage(port, table=table)
        client = _client(stage)
        own = stage(["a", "b"], limit=4)
        pd.testing.assert_frame_equal(client.search_batch(["a", "b"], limit=4).run, own, check_dtype=False)
        single = client.search_sync({"query": "a", "limit": 4})
        assert [r.id for r in single.results] == list(own[own["qid"] == 0]["doc_id"])


def test_a_fingerprinted_user_retriever_is_keyed_by_its_table_too() -> None:
    """Two stages of one port that declares a fingerprint, over tables of other row orders (or a
    corpus loaded again in another order), share nothing: the codes of one are not the other's."""
    from kolm_search.compose.runner import sharing

    class Named(ListRetriever):
        def fingerprint(self) -> str:
            return "my-retriever-v1"

    table = pd.DataFrame({"id": [d.id for d in CORPUS], "content": [d.content for d in CORPUS]})
    port = Named(CORPUS[:5])
    first, other = as_stage(port, table=table), as_stage(port, table=table.iloc[::-1].reset_index(drop=True))
    assert first.fingerprint() != other.fingerprint()
    assert first.fingerprint() == as_stage(port, table=table.copy()).fingerprint()
    with sharing():
        runs = [stage(["a", "b"], limit=5) for stage in (first, other)]
    assert list(runs[0]["doc_id"]) == list(runs[1]["doc_id"]) == [d.id for d in CORPUS[:5]] * 2


@pytest.mark.parametrize("form", ["empty list", "empty frame", "modes"])
def test_call_has_search_batch_dtypes_for_empty_and_mixed_mode_batches(small, form: str) -> None:  # type: ignore[no-untyped-def]
    # no queries gave a float rank; a mode BM25 finds nothing for beside one it answers gave an
    # object doc_id column (the empty part's); search_batch gives int64 and strings
    _, queries, bm25, _, emb = small
    given = {"empty list": [], "empty frame": queries.iloc[:0],
             "modes": [{"query": t, "mode": ("fulltext", "vector")[i % 2]} for i, t in enumerate(queries["query"])]}
    for stage in (bm25, bm25 % 30):
        run = stage(given[form], limit=5)
        ref = _client(stage, embedder=emb).search_batch(given[form], limit=5).run
        pd.testing.assert_frame_equal(run, ref)


class _Hanging:
    """A port whose calls hang until ``release`` is set (sync: a thread waits; async: a coroutine sleeps)."""

    def __init__(self, run_async: bool) -> None:
        import threading

        self.run_async, self.release, self.calls = run_async, threading.Event(), 0

    def _wait(self, value):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.run_async:
            async def later():  # type: ignore[no-untyped-def]
                await asyncio.sleep(3600)
                return value
            return later()
        self.release.wait(60)
        return value


class _HangingRetriever(_Hanging):
    def retrieve(self, context):  # type: ignore[no-untyped-def]
        return self._wait([])


class _HangingReranker(_Hanging):
    def rerank(self, documents, context):  # type: ignore[no-untyped-def]
        return self._wait(documents)


@pytest.mark.parametrize("run_async", [False, True])
def test_a_port_that_never_answers_fails_at_its_timeout_naming_the_stage(small, run_async: bool) -> None:  # type: ignore[no-untyped-def]
    """``as_stage(port, timeout=s)``: every wait on a user port has a deadline; a late call is
    abandoned and the stage is a SearchError naming it, alone, composed or in an experiment."""
    import time

    from kolm_search import Experiment
    from kolm_search.io import Dataset

    corpus, queries, bm25, _, _ = small
    retriever, reranker = _HangingRetriever(run_async), _HangingReranker(run_async)
    try:
        slow_first = as_stage(retriever, table=corpus, timeout=0.2)
        slow_second = as_stage(reranker, timeout=0.2)
        qrels = pd.DataFrame({"qid": queries["qid"].iloc[:2], "doc_id": corpus["id"].iloc[:2], "relevance": 1})
        ds = Dataset(corpus=corpus, queries=queries.iloc[:2], qrels=qrels)
        for pipe in (slow_first, slow_first % 3, Fuse(slow_first % 3, bm25 % 3), bm25 % 5 >> slow_second):
            t0 = time.monotonic()
            with pytest.raises(SearchError, match=r"did not answer within timeout=0.2s") as caught:
                pipe(queries.iloc[:2])
            assert time.monotonic() - t0 < 30  # (not the hour the port would take)
            assert "as_stage(" in str(caught.value)
        with pytest.raises(SearchError, match="as_stage.*did not answer"):
            Experiment({"slow": bm25 % 5 >> slow_second}, ds, ["ndcg@10"], limit=5, progress=False,
                       drop_self_hits=False).run_pipelines()
    finally:
        retriever.release.set()
        reranker.release.set()


def test_a_call_that_never_started_says_why(small, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A sync port's call waits for a thread of the daemon pool; when every thread is held by
    calls abandoned at their deadlines, the timeout says the call never started (not that the
    port was slow), and once the hung call returns the pool serves again."""
    import time

    from kolm_search import _bridge

    pool = _bridge.DaemonPool(max_workers=1, max_threads=1, idle_seconds=1.0)
    monkeypatch.setattr(_bridge, "DAEMON_POOL", pool)
    _, queries, bm25, _, _ = small
    reranker = _HangingReranker(False)
    slow = bm25 % 5 >> as_stage(reranker, timeout=0.2)
    try:
        with pytest.raises(SearchError, match=r"within timeout=0.2s \(call abandoned\)") as first:
            slow(queries.iloc[:1])
        assert "never started" not in str(first.value)
        with pytest.raises(SearchError, match=r"never started: 0 of kolm_search's 1 port workers were busy and 1 "
                                              r"threads were held by calls abandoned"):
            slow(queries.iloc[:1])
        assert reranker.calls == 1  # the second call never reached the port
    finally:
        reranker.release.set()
    deadline = time.monotonic() + 10
    while pool.threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.threads == 0
    pd.testing.assert_frame_equal(slow(queries.iloc[:1]), (bm25 % 5)(queries.iloc[:1]))
    assert reranker.calls == 2


def test_a_timeout_leaves_a_port_that_answers_in_time_as_it_was(small) -> None:  # type: ignore[no-untyped-def]
    corpus, queries, bm25, _, _ = small
    port = MMRReranker(BatchHashEmbedder(), lambda_=0.5)
    pipe = bm25 % 10 >> port
    timed = bm25 % 10 >> as_stage(_UserReranker(lambda docs, ctx: port.rerank(docs, ctx)), timeout=60)
    plain = bm25 % 10 >> as_stage(_UserReranker(lambda docs, ctx: port.rerank(docs, ctx)))
    pd.testing.assert_frame_equal(timed(queries), plain(queries), check_exact=True)
    assert len(pipe(queries)) == len(timed(queries))
    fast = as_stage(ListRetriever(), table=pd.DataFrame({"id": [d.id for d in CORPUS],
                                                         "content": [d.content for d in CORPUS]}), timeout=60)
    assert len(fast(["anything"])) > 0

    class Named(_UserReranker):
        def fingerprint(self) -> str:
            return "named-reranker-1"

    named = Named(lambda d, c: d)
    assert as_stage(named, timeout=1).fingerprint() == as_stage(named).fingerprint()  # (it changes no output)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_timeout_that_is_no_duration_is_refused(small, bad) -> None:  # type: ignore[no-untyped-def]
    corpus, _, bm25, _, _ = small
    with pytest.raises(KolmError, match=r"as_stage\(ListRetriever\): timeout"):  # naming the port
        as_stage(ListRetriever(), table=corpus, timeout=bad)
    with pytest.raises(KolmError, match=r"as_stage\(_UserReranker\): timeout"):
        as_stage(_UserReranker(lambda d, c: d), timeout=bad)
    with pytest.raises(KolmError, match="a stage is taken as it is"):
        as_stage(bm25, timeout=5)


class _Stubborn:
    """A re-ranking port whose coroutine ignores cancellation until ``release`` is set (sync
    method returning it, or ``async def``)."""

    def __init__(self, run_async: bool) -> None:
        import threading

        self.release = threading.Event()
        if run_async:
            async def rerank(documents, context):  # type: ignore[no-untyped-def]
                return await self._ignore()
            self.rerank = rerank
        else:
            self.rerank = lambda documents, context: self._ignore()

    async def _ignore(self):  # type: ignore[no-untyped-def]
        while not self.release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # (cancelled: carries on)
        return []


@pytest.mark.parametrize("in_loop", [False, True])
@pytest.mark.parametrize("run_async", [False, True])
def test_a_port_ignoring_cancellation_cannot_hold_the_caller_past_its_timeout(small, run_async: bool,  # type: ignore[no-untyped-def]
                                                                              in_loop: bool) -> None:
    """A late coroutine that ignores its cancellation is left behind: the stage still fails at
    the deadline, from plain code and from inside a running loop (a notebook)."""
    import threading

    _, queries, bm25, _, _ = small
    port = _Stubborn(run_async)
    pipe = bm25 % 3 >> as_stage(port, timeout=0.2)
    caught: list[BaseException] = []
    finished = threading.Event()

    def run() -> None:
        async def in_a_loop() -> None:
            pipe(queries.iloc[:1])
        try:
            asyncio.run(in_a_loop()) if in_loop else pipe(queries.iloc[:1])
        except BaseException as exc:  # (what the call raised, asserted below)
            caught.append(exc)
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        assert finished.wait(30), "the stage waited for a port that ignores its cancellation"
    finally:
        port.release.set()
    assert len(caught) == 1 and isinstance(caught[0], SearchError)
    assert "did not answer within timeout=0.2s" in str(caught[0])


def test_a_timeout_calls_a_sync_port_one_call_at_a_time_as_without_it(small) -> None:  # type: ignore[no-untyped-def]
    """With a timeout a sync ``rerank`` is still called once at a time (a port need not be
    thread-safe), and each call's time starts when it does, not while it waits its turn."""
    import threading
    import time

    _, queries, bm25, _, _ = small

    class Counting:
        def __init__(self) -> None:
            self.lock, self.active, self.most = threading.Lock(), 0, 0

        def rerank(self, documents, context):  # type: ignore[no-untyped-def]
            with self.lock:
                self.active += 1
                self.most = max(self.most, self.active)
            time.sleep(0.005)
            with self.lock:
                self.active -= 1
            return documents

    port = Counting()
    timed = bm25 % 3 >> as_stage(port, timeout=60)
    plain = bm25 % 3 >> as_stage(Counting())
    pd.testing.assert_frame_equal(timed(queries), plain(queries), check_exact=True)
    assert port.most == 1


def test_the_repeats_kernel_equals_its_twin() -> None:
    """:func:`first_repeat` (the stamping kernel) and its sorting twin find the same first repeat
    of random frames, none where every query's documents differ."""
    from kolm_search._kernels import load

    repeats = load("repeats")
    rng = np.random.default_rng(7)
    for _ in range(200):
        n_docs = int(rng.integers(1, 30))
        counts = rng.integers(0, 6, size=int(rng.integers(1, 6)))
        query = np.repeat(np.arange(len(counts)), counts)
        doc = rng.integers(0, n_docs, size=len(query))
        found = repeats.first_repeat(query, doc, n_docs)
        assert found == repeats.first_repeat_numpy(query, doc, n_docs)
        seen = [(int(q), int(d)) for q, d in zip(query, doc, strict=True)]
        assert found == next((i for i in range(len(seen)) if seen[i] in seen[:i]), -1)


class _Overlap(ServedByRunner, Stage):
    """A user's retrieving stage: each query's documents by how many of its words they hold (its
    own ``transform``), a ``BatchRetriever`` through ``ServedByRunner``."""

    def __init__(self, table) -> None:  # type: ignore[no-untyped-def]
        self.table = table

    def transform(self, batch, candidates):  # type: ignore[no-untyped-def]
        texts = [set(t.lower().split()) for t in self.table.texts()]
        ptr, docs, scores = [0], [], []
        for query in batch.texts:
            words = set(query.lower().split())
            score = np.array([len(words & t) for t in texts], np.float64)
            top = [d for d in np.argsort(-score, kind="stable")[:batch.limit] if score[d] > 0]
            docs += top
            scores += [float(score[d]) for d in top]
            ptr.append(len(docs))
        return CandidateFrame.from_ptr(ptr, docs, scores)


def test_a_user_stage_with_served_by_runner_serves_a_search_client(small) -> None:  # type: ignore[no-untyped-def]
    """A ``Stage`` subclass is a ``BatchRetriever`` when it says so with ``ServedByRunner`` among
    its bases (as the operators have): a client over it answers as the stage does, in batch and
    one query at a time, alone and composed."""
    corpus, queries, bm25, _, _ = small
    mine = _Overlap(bm25.table)
    assert not implements(Stage(), BatchRetriever) and implements(mine, BatchRetriever)
    for stage in (mine, mine % 7, mine + bm25):
        got = _client(stage).search_batch(queries, limit=7).run
        pd.testing.assert_frame_equal(got, stage(queries, limit=7), check_dtype=False)
        one = asyncio.run(_client(stage).search({"query": queries["query"][0], "limit": 7}))
        assert [d.id for d in one.results] == got[got["qid"] == queries["qid"][0]]["doc_id"].tolist()


def test_operands_over_other_documents_are_a_search_error_naming_the_stage() -> None:
    """Two indexes whose codes name other documents (other corpora of one size, or one corpus
    after other deletions) are refused when combined, naming the operand: their frames would be
    summed code by code, the right one's documents read as the left one's (a silent wrong run
    before). Indexes of the same ids over other texts combine."""
    left = pd.DataFrame({"id": ["a1", "a2", "a3"], "content": ["wing flutter", "heat flow", "wing heat"]})
    right = pd.DataFrame({"id": ["b1", "b2", "b3"], "content": ["wing", "flow flow", "heat"]})
    a, b = BM25Retriever(left), BM25Retriever(right)
    for pipe in (a + b, a | b, a & b, a ^ b, a ** b, a % 2 + 0.5 * b, (a ** b) % 2):
        with pytest.raises(SearchError, match=r"indexes other documents than the pipeline's table \(3 against 3"):
            pipe(["wing", "flow"])
    same_ids = BM25Retriever(left.assign(content=["flutter", "flow", "wing"]))  # one corpus, other texts
    got = (a + same_ids)(["wing", "flow"], limit=3)
    want = pd.concat([a(["wing", "flow"], limit=3), same_ids(["wing", "flow"], limit=3)])
    summed = want.groupby(["qid", "doc_id"], sort=False)["score"].sum()
    assert dict(zip(zip(got["qid"], got["doc_id"]), got["score"])) == pytest.approx(summed.to_dict())
    corpus = pd.DataFrame({"id": [f"d{i}" for i in range(6)], "content": ["wing heat flow"] * 6})
    x, y = BM25Retriever(corpus), BM25Retriever(corpus)
    x.delete(["d1"]), y.delete(["d4"])  # as many documents each, other ones
    with pytest.raises(SearchError, match="indexes other documents"):
        (x + y)(["wing"])
