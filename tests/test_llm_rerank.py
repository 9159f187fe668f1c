"""LLM rerankers against a fake chat-completions server on 127.0.0.1 that answers
deterministically, badly, slowly and not at all (tests/reliability/_servers.py ChatModel)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import KolmValueError, presets
from kolm_search.adapters import (
    LLMListwiseReranker,
    LLMPointwiseReranker,
    OpenAICompatibleClient,
    PromptTemplate,
    ScoreCache,
)
from kolm_search.adapters.listwise import parse_permutation, window_bounds
from kolm_search.jobs.rerank import rerank_run
from kolm_search.types import SearchDocument
from tests.reliability._servers import ChatModel, RawServer, relevance

WORDS = ["shock", "wave", "heat", "flow", "wing", "plate", "nozzle", "boundary", "layer", "cone"]
CORPUS = pd.DataFrame({"id": [f"d{i:02d}" for i in range(30)],
                       "content": [" ".join(WORDS[(i * k) % 10] for k in range(1, 2 + i % 4)) + f" doc{i}"
                                   for i in range(30)]})
QUERIES = pd.DataFrame({"qid": ["q1", "q2", "q3"], "query": ["shock wave flow", "heat plate", "wing cone layer"]})
RUN = pd.DataFrame([(q, f"d{(j * 7 + n) % 30:02d}", float(30 - j)) for n, q in enumerate(QUERIES.qid) for j in range(30)],
                   columns=["qid", "doc_id", "score"])
TEXT = dict(zip(CORPUS["id"], CORPUS["content"], strict=True))
QTEXT = dict(zip(QUERIES["qid"], QUERIES["query"], strict=True))


@pytest.fixture()
def chat() -> Iterator[tuple[ChatModel, OpenAICompatibleClient]]:
    model = ChatModel()
    server = RawServer(model)
    yield model, OpenAICompatibleClient(server.url() + "/v1", "fake-model", timeout=5, max_retries=0)
    server.close()


def job(reranker: Any, top_k: int = 30, **kw: Any) -> pd.DataFrame:
    return rerank_run(RUN, CORPUS, reranker, top_k=top_k, queries=QUERIES, progress=False, **kw)


def test_pointwise_grades_rank_by_the_model(chat: tuple[ChatModel, OpenAICompatibleClient]) -> None:
    model, client = chat
    reranker = LLMPointwiseReranker(client, max_concurrency=4)
    out = job(reranker, top_k=12)
    for qid, block in out.groupby("qid", sort=False):
        incoming = list(RUN[RUN.qid == qid].doc_id[:12])
        grades = [min(3, relevance(QTEXT[qid], TEXT[d])) for d in incoming]
        oracle = [incoming[i] for i in sorted(range(12), key=lambda i: (-grades[i], i))]  # stable, grade desc
        assert list(block.doc_id[:12]) == oracle
        assert list(block.score[:12]) == sorted(grades, reverse=True)
        assert list(block.doc_id[12:]) == list(RUN[RUN.qid == qid].doc_id[12:])  # the tail keeps its order
    assert reranker.counts["requests"] == len(model.prompts) == 36 and model.peak <= 4


def test_pointwise_keeps_max_concurrency_requests_in_flight(chat: tuple[ChatModel, OpenAICompatibleClient]) -> None:
    model, client = chat
    model.latency = 0.15
    job(LLMPointwiseReranker(client, max_concurrency=5), top_k=4)
    assert model.peak == 5  # twelve requests, five at a time: never more, and the limit is reached


def test_pointwise_bad_answers_never_fail_the_job(chat: tuple[ChatModel, OpenAICompatibleClient],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    model, client = chat
    bad = {"d00": "garbage", "d07": "empty", "d14": "silent", "d21": "slow"}
    model.slow = 1.0
    model.behaviour = lambda kind, query, prompt: next((b for d, b in bad.items() if f": {TEXT[d]}\n" in prompt), None)
    client = OpenAICompatibleClient(client.url.rsplit("/chat", 1)[0], "fake-model", timeout=0.4, max_retries=0)
    reranker = LLMPointwiseReranker(client, max_concurrency=8)
    with caplog.at_level(logging.WARNING, logger="kolm_search.rerank"):
        out = job(reranker, top_k=8)
    assert reranker.counts["unparseable"] >= 1 and reranker.counts["empty"] >= 1
    assert reranker.counts["failed"] >= 2 and reranker.counts["timed_out"] >= 2
    for qid, block in out.groupby("qid", sort=False):
        incoming = list(RUN[RUN.qid == qid].doc_id[:8])
        failed = [d for d in incoming if d in bad]
        scored = [d for d in incoming if d not in bad]
        assert list(block.doc_id[:8])[len(scored):] == failed  # unscored last, in their incoming order
        assert block.score.is_monotonic_decreasing
    assert "ranked unscored" in caplog.text


def test_yes_no_with_and_without_log_probabilities(chat: tuple[ChatModel, OpenAICompatibleClient]) -> None:
    model, client = chat
    reranker = LLMPointwiseReranker(client, mode="yes_no")
    pairs = [(QTEXT["q1"], SearchDocument(i, TEXT[i])) for i in list(TEXT)[:6]]

    got = asyncio.run(reranker.score_pairs(pairs))
    want = [relevance(q, d.content) / (relevance(q, d.content) + 1.0) for q, d in pairs]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert reranker.counts["no_logprobs"] == 0
    model.logprobs = False
    got = asyncio.run(reranker.score_pairs(pairs))
    assert list(got) == [1.0 if w > 0.5 else 0.0 for w in want] and reranker.counts["no_logprobs"] == len(pairs)


def test_parse_permutation_repairs_missing_repeated_and_unknown_ids() -> None:
    order, problems = parse_permutation("[3] > [1] > [3] > [9] > [0] > [2]", 4)
    assert order == [2, 0, 1, 3] and problems == {"repeated": 1, "unknown": 2, "missing": 1}
    assert parse_permutation("2, 1, 3", 3) == ([1, 0, 2], {})  # bare numbers when nothing is bracketed
    assert parse_permutation("Ranking of 3 passages: [2] > [3] > [1]", 3)[0] == [1, 2, 0]  # brackets win
    assert parse_permutation("no idea", 3) == ([0, 1, 2], {"missing": 3})
    assert window_bounds(30, 20, 10) == [(10, 30), (0, 20)]
    assert window_bounds(25, 20, 10) == [(5, 25), (0, 15)]  # the top is always ranked
    assert window_bounds(5, 20, 10) == [(0, 5)] and window_bounds(1, 20, 10) == []
    assert window_bounds(100, 20, 10)[-1] == (0, 20) and len(window_bounds(100, 20, 10)) == 9


def test_listwise_sliding_window_from_the_bottom(chat: tuple[ChatModel, OpenAICompatibleClient]) -> None:
    model, client = chat
    reranker = LLMListwiseReranker(client)
    out = job(reranker)
    assert reranker.counts["windows"] == len(model.prompts) == 3 * 2  # 30 documents: [10, 30) then [0, 20)
    first = next(p for p in model.prompts if f"Query: {QTEXT['q1']}\n" in p)  # queries run concurrently
    incoming = list(RUN[RUN.qid == "q1"].doc_id)
    assert f"[1] {TEXT[incoming[10]]}" in first and f"[20] {TEXT[incoming[29]]}" in first  # the bottom window first
    for qid, block in out.groupby("qid", sort=False):
        docs = list(RUN[RUN.qid == qid].doc_id)
        best = sorted(docs, key=lambda d: (-relevance(QTEXT[qid], TEXT[d]), TEXT[d]))
        assert list(block.doc_id[:10]) == best[:10]  # the best ten carried to the top, in order
        assert sorted(block.doc_id) == sorted(docs) and list(block.score) == list(np.arange(30, 0, -1.0))


@pytest.mark.parametrize("bad", ["bad_ids", "empty", "garbage", "silent"])
def test_listwise_bad_answers_are_repaired_or_keep_the_window(chat: tuple[ChatModel, OpenAICompatibleClient],
                                                              bad: str) -> None:
    model, client = chat
    model.behaviour = lambda kind, query, prompt: bad if query == QTEXT["q2"] else None
    client = OpenAICompatibleClient(client.url.rsplit("/chat", 1)[0], "fake-model", timeout=0.4, max_retries=0)
    reranker = LLMListwiseReranker(client, window=10, step=5)
    out = job(reranker, top_k=10)
    block, docs = list(out[out.qid == "q2"].doc_id[:10]), list(RUN[RUN.qid == "q2"].doc_id[:10])
    right = sorted(docs, key=lambda d: (-relevance(QTEXT["q2"], TEXT[d]), TEXT[d]))
    if bad == "bad_ids":  # "[a] > [a] > [99] > rest without b": a first, the rest as answered, b last
        assert block == [right[0], *right[2:], right[1]]
        assert reranker.counts["repaired"] == 1 and reranker.counts["repeated"] == 1
        assert reranker.counts["unknown"] == 1 and reranker.counts["missing"] == 1
    elif bad == "garbage":  # no identifier at all: every passage missing, the window keeps its order
        assert block == docs and reranker.counts["missing"] == 10
    else:
        assert block == docs and reranker.counts["empty" if bad == "empty" else "failed"] == 1
        if bad == "silent":
            assert reranker.counts["timed_out"] == 1
    good = list(out[out.qid == "q1"].doc_id[:10])
    assert good == sorted(good, key=lambda d: (-relevance(QTEXT["q1"], TEXT[d]), TEXT[d]))


@pytest.mark.parametrize("kind", ["pointwise", "listwise"])
def test_cached_by_the_score_cache(chat: tuple[ChatModel, OpenAICompatibleClient], kind: str, tmp_path: Any) -> None:
    model, client = chat
    make = (lambda **kw: LLMPointwiseReranker(client, **kw)) if kind == "pointwise" else \
        (lambda **kw: LLMListwiseReranker(client, window=8, step=4, **kw))
    first = job(make(), top_k=12, score_cache=ScoreCache(tmp_path / "s.sqlite"))
    asked = len(model.prompts)
    second = job(make(score_cache=ScoreCache(tmp_path / "s.sqlite")), top_k=12)
    assert len(model.prompts) == asked  # no request at all
    pd.testing.assert_frame_equal(first, second, check_exact=True)


def test_usable_in_search_batch(chat: tuple[ChatModel, OpenAICompatibleClient]) -> None:
    model, client = chat
    pipeline = presets.bm25(CORPUS)
    pipeline.modules.reranker = LLMListwiseReranker(client, window=5, step=3)
    run = pipeline.search_batch(QUERIES, limit=5).run
    for qid, block in run.groupby("qid", sort=False):
        got = list(block.doc_id)
        assert got[0] == max(got, key=lambda d: (relevance(QTEXT[qid], TEXT[d]), [-ord(c) for c in TEXT[d]]))
    assert len(model.prompts) == 3
    import pickle  # shipped to Dask workers after use: the connection pools and SSL context stay behind

    again = pickle.loads(pickle.dumps(pipeline.modules.reranker))
    assert again.fingerprint() == pipeline.modules.reranker.fingerprint()


def test_prompts_are_replaceable_and_checked(chat: tuple[ChatModel, OpenAICompatibleClient]) -> None:
    model, client = chat
    mine = PromptTemplate(system="", user="Query: {query}\n\nDocument: {document}\n\nGrade {low}-{high}. On a scale")
    reranker = LLMPointwiseReranker(client, prompt=mine)
    job(reranker, top_k=2)
    # requests go out concurrently: the first query's prompt is among them, not necessarily first
    first = [p for p in model.prompts if p.startswith("Query: shock wave flow\n\nDocument: ")]
    assert first and all("Grade 0-3" in p for p in model.prompts)
    assert reranker.fingerprint() != LLMPointwiseReranker(client).fingerprint()
    with pytest.raises(KolmValueError, match=r"names \['passage'\]"):
        LLMPointwiseReranker(client, prompt=PromptTemplate("", "{query} {passage}"))
    with pytest.raises(KolmValueError, match="not a valid template"):
        LLMListwiseReranker(client, prompt=PromptTemplate("", "{query"))
    with pytest.raises(KolmValueError, match="scale"):
        LLMPointwiseReranker(client, scale=(3, 1))
    with pytest.raises(KolmValueError, match="step at most window"):
        LLMListwiseReranker(client, window=4, step=5)


def test_llm_rerankers_declare_their_parameters_and_set_them_checked() -> None:
    """Issue 27: every built-in stage has get_params/set_params; a changed parameter changes the
    fingerprint (an Experiment never shares the output of another setting), a bad one changes
    nothing."""
    from kolm_search.adapters import LLMListwiseReranker, LLMPointwiseReranker
    from kolm_search.adapters.llm import OpenAICompatibleClient

    client = OpenAICompatibleClient("http://127.0.0.1:9/v1", model="m")
    point = LLMPointwiseReranker(client, max_tokens=4)
    assert point.get_params()["params"] == {"max_tokens": 4} and point.get_params()["mode"] == "grade"
    before = point.fingerprint()
    point.counts["requests"] = 3
    point.set_params(mode="yes_no", top_logprobs=3)
    assert point.mode == "yes_no" and point.params["logprobs"] is True and point.params["top_logprobs"] == 3
    assert point.params["max_tokens"] == 4 and point.counts["requests"] == 3
    assert point.fingerprint() != before
    changed = point.fingerprint()
    for bad in ({"scale": (3, 0)}, {"max_chars": 0}, {"params": [1]}, {"model": "other"}):
        with pytest.raises((KolmValueError, TypeError)):
            point.set_params(**bad)
        assert point.fingerprint() == changed  # nothing changed

    listwise = LLMListwiseReranker(client, window=4, step=2)
    assert {k: v for k, v in listwise.get_params().items() if k != "prompt"} == {
        "window": 4, "step": 2, "max_chars": 500, "max_concurrency": 8, "params": {}}
    first = listwise.fingerprint()
    listwise.set_params(window=6, params={"temperature": 0})
    assert (listwise.window, listwise.step, listwise.params) == (6, 2, {"temperature": 0})
    assert listwise.fingerprint() != first
    with pytest.raises(KolmValueError, match="step at most window"):
        listwise.set_params(window=2, step=3)
    assert (listwise.window, listwise.step) == (6, 2)
    with pytest.raises(KolmValueError, match="no parameter .client."):
        listwise.set_params(client=client)
