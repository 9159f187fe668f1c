"""The retriever kinds a saved client names (kolm_search.contract.saved_kinds)."""

from __future__ import annotations

import pytest

from kolm_search import BM25Retriever, CompositeRetriever, DenseRetriever
from kolm_search.contract.saved_kinds import class_of_kind, kind_of, saved_kind
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse


def test_the_built_in_retrievers_register_their_kinds() -> None:
    for kind, cls in (("bm25", BM25Retriever), ("dense", DenseRetriever), ("feedback", FeedbackRetriever),
                      ("composite", CompositeRetriever)):
        assert class_of_kind(kind) is cls
    assert class_of_kind("pickle") is None and class_of_kind(["bm25"]) is None  # unhashable: no kind, no crash


def test_a_kind_is_of_the_exact_class_and_fuse_saves_as_a_composite() -> None:
    docs = [{"id": "a", "content": "red fox"}, {"id": "b", "content": "blue sky"}]
    bm25 = BM25Retriever(docs)
    assert kind_of(bm25) == "bm25"
    assert kind_of(Fuse(bm25 % 2, bm25 % 2)) == "composite"

    class Mine(BM25Retriever):  # a subclass is not saved as its base (it may hold more)
        pass

    assert kind_of(Mine(docs)) is None
    assert kind_of(object()) is None


def test_a_second_class_cannot_take_a_kind_that_loads() -> None:
    with pytest.raises(KolmValueError, match="'bm25' is already loaded by BM25Retriever"):
        saved_kind("bm25")(type("Other", (), {}))
    assert class_of_kind("bm25") is BM25Retriever
