"""Acceptance probes of issue 19 (feedback, incremental indexes): regressions found by probing."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from kolm_search import presets
from kolm_search.errors import KolmValueError
from kolm_search.evaluation.crossval import cross_validate
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.feedback import FEEDBACK_MODELS, FeedbackRetriever
from kolm_search.retrievers.postings import Postings
from tests.fakes import HashEmbedder

# every document has 3 tokens and every term stays in the vocabulary after the delete below,
# so postings counted before the change look valid (same n_docs, vocabulary and lengths)
TEXTS = ["cat dog bird", "dog chase cat", "bird food cat", "food dog cat", "bird chase food", "cat dog bird"]
DOCS = [{"id": f"d{i}", "content": t} for i, t in enumerate(TEXTS)]
NEW = {"id": "n", "content": "cat food food"}


@pytest.mark.parametrize("model", FEEDBACK_MODELS)
def test_feedback_with_given_postings_follows_add_and_delete(model: str) -> None:
    kw = {"max_df_ratio": 1.0} if model == "rm3" else {}
    bm25 = BM25Retriever(DOCS)
    postings = Postings.from_tokens(bm25.tokenizer(t) for t in bm25.table.texts(bm25.fields))
    fb = FeedbackRetriever(bm25, model, postings=postings, **kw)  # type: ignore[arg-type]
    fb.expand(["cat"])  # counts cached before the change
    bm25.add([NEW])
    bm25.delete(["d0"])
    rebuilt = FeedbackRetriever(BM25Retriever([*DOCS[1:], NEW]), model, **kw)  # type: ignore[arg-type]
    got, want = fb.expand(["food", "cat dog"]), rebuilt.expand(["food", "cat dog"])
    assert [list(d) for d in got] == [list(d) for d in want]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w)


def _small_bm25() -> BM25Retriever:
    return BM25Retriever([{"id": f"d{i}", "content": t} for i, t in enumerate(TEXTS)])


def test_score_weighted_takes_empty_python_lists() -> None:
    bm25 = _small_bm25()
    docs, scores, counts = bm25.score_weighted([0], [], [], 3)  # no queries
    assert docs.shape == (0, 3) and counts.shape == (0,)
    docs, scores, counts = bm25.score_weighted([0, 0, 0], [], [], 3)  # two empty queries
    assert counts.tolist() == [0, 0] and (docs == -1).all()
    want = bm25.score_terms([{}, {}], 3)
    assert all((a == b).all() for a, b in zip((docs, scores, counts), want, strict=True))


def test_score_weighted_non_numeric_weights_are_a_kolm_error() -> None:
    with pytest.raises(KolmValueError, match="q_weights"):
        _small_bm25().score_weighted([0, 1], [0], ["heavy"], 3)


def test_weight_beyond_float32_is_refused_naming_the_given_weight_without_a_warning() -> None:
    bm25 = _small_bm25()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KolmValueError, match=r"'cat' has weight 1e\+300"):
            bm25.score_terms([{"cat": 1e300}], 3)


@pytest.mark.filterwarnings("ignore:presets.hybrid_plus is deprecated:DeprecationWarning")
@pytest.mark.parametrize("lsa_components", [4, 8])  # 8: the LSA and the pipeline embedder have one dimension
def test_hybrid_plus_add_with_embeddings_leaves_the_lsa_child_to_its_own_model(lsa_components: int) -> None:
    rng = np.random.default_rng(0)
    words = "cat dog bird fish food mat sat chase hand craft weave tree leaf rock sand sea sky sun moon star".split()
    docs = [{"id": f"d{i}", "content": " ".join(rng.choice(words, 6))} for i in range(30)]
    given = presets.hybrid_plus(docs[:25], HashEmbedder(), lsa_components=lsa_components)
    given.add(docs[25:], embeddings=np.array([HashEmbedder().vector(d["content"]) for d in docs[25:]]))
    embedded = presets.hybrid_plus(docs[:25], HashEmbedder(), lsa_components=lsa_components)
    embedded.add(docs[25:])
    for query in ("cat fish", "sun moon star", "rock"):
        a = [(d.id, d.score) for d in given.search_sync({"query": query, "limit": 30}).results]
        b = [(d.id, d.score) for d in embedded.search_sync({"query": query, "limit": 30}).results]
        assert a == b


def test_cross_validate_refuses_candidates_whose_names_collide_as_str() -> None:
    qrels = pd.DataFrame([(q, f"d{q}", 1) for q in range(4)], columns=["qid", "doc_id", "relevance"])
    run = pd.DataFrame([(q, f"d{j}", 1.0 / (j + 1)) for q in range(4) for j in range(4)],
                       columns=["qid", "doc_id", "score"])
    with pytest.raises(KolmValueError, match="'1'"):
        cross_validate({1: run, "1": run.assign(score=-run["score"])}, qrels, folds=2)


@pytest.mark.parametrize("k", [0, -3, 2.5, True, "5", None])
def test_top_k_calls_refuse_a_k_that_is_not_a_positive_integer(k: object) -> None:
    """``k <= 0`` used to give one result silently; now every top-k entry point names the value."""
    from kolm_search.retrievers.dense import exact_topk

    bm25 = BM25Retriever([{"id": "a", "content": "wing flow"}, {"id": "b", "content": "heat flow"}])
    calls = [lambda: bm25.score_texts(["flow"], k), lambda: bm25.score_terms([{"flow": 1.0}], k),
             lambda: exact_topk(np.ones((1, 2), np.float32), np.ones((3, 2), np.float32), k)]  # type: ignore[arg-type]
    for call in calls:
        with pytest.raises(KolmValueError, match=re.escape(f"k must be a positive integer, got {k!r}")):
            call()
    docs, _, counts = bm25.score_texts(["flow"], np.int64(5))  # numpy integers are integers; k caps at the table
    assert docs.shape == (1, 2) and counts.tolist() == [2]
