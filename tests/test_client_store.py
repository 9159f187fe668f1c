"""SearchClient.save / SearchClient.load and loaded indexes wherever documents are taken: a saved
and loaded client (BM25, BM25 with RM3, hybrid over LSA) answers every Cranfield query as the one
that was saved; presets take loaded indexes as they are; what cannot be saved is refused before
anything is written, what is not saved is asked for at load; a re-save that fails midway leaves
the old client loadable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kolm_search import (
    BM25Retriever,
    DenseRetriever,
    DocumentTable,
    KolmTypeError,
    KolmValueError,
    SearchClient,
    presets,
)
from kolm_search.adapters import LSAEmbedder, MMRReranker


@pytest.fixture(scope="module")
def corpus(cranfield: dict[str, pd.DataFrame]) -> DocumentTable:
    return DocumentTable.from_frame(cranfield["corpus"])


@pytest.fixture(scope="module")
def lsa(corpus: DocumentTable) -> LSAEmbedder:
    return LSAEmbedder(corpus.texts(), n_components=64)


def _run(client: Any, queries: pd.DataFrame) -> pd.DataFrame:
    return client.search_batch(queries.head(60), limit=20).run


@pytest.mark.parametrize("kind", ["bm25", "rm3", "hybrid"])
def test_saved_client_answers_as_the_one_saved(kind: str, corpus: DocumentTable, lsa: LSAEmbedder,
                                               cranfield: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    client = {"bm25": lambda: presets.bm25(corpus), "rm3": lambda: presets.bm25(corpus, feedback="rm3"),
              "hybrid": lambda: presets.hybrid(corpus, lsa, k=30, weights=[0.6, 0.4])}[kind]()
    client.options.default_limit = 7
    client.save(tmp_path / "client")
    manifest = json.loads((tmp_path / "client" / "client.json").read_text())
    assert manifest["format"] == "kolm_search.client" and manifest["folder"].startswith("retriever-")
    loaded = SearchClient.load(tmp_path / "client", **({"embedder": lsa} if kind == "hybrid" else {}))
    pd.testing.assert_frame_equal(_run(loaded, cranfield["queries"]), _run(client, cranfield["queries"]))
    assert loaded.options.default_limit == 7 and loaded.options.default_mode == client.options.default_mode
    if kind == "hybrid":
        with pytest.raises(KolmValueError, match=r"had \[.embedder.\].*embedder=\.\.\."):
            SearchClient.load(tmp_path / "client")


def test_loaded_indexes_are_accepted_wherever_documents_are(corpus: DocumentTable, lsa: LSAEmbedder,
                                                             cranfield: dict[str, pd.DataFrame], tmp_path: Path) -> None:
    queries = cranfield["queries"]
    BM25Retriever(corpus).save(tmp_path / "bm25")
    DenseRetriever(corpus, lsa).save(tmp_path / "dense")
    sparse, dense = BM25Retriever.load(tmp_path / "bm25"), DenseRetriever.load(tmp_path / "dense", lsa)
    pd.testing.assert_frame_equal(_run(presets.bm25(sparse), queries), _run(presets.bm25(corpus), queries))
    pd.testing.assert_frame_equal(_run(presets.dense(dense, lsa), queries), _run(presets.dense(corpus, lsa), queries))
    want = _run(presets.hybrid(corpus, lsa), queries)
    pd.testing.assert_frame_equal(_run(presets.hybrid(sparse, lsa), queries), want)
    pd.testing.assert_frame_equal(_run(presets.hybrid(dense, lsa), queries), want)
    assert DocumentTable.coerce(dense) is dense.table  # an index gives its documents to anything that takes them
    pd.testing.assert_frame_equal(_run(presets.bm25(dense), queries), _run(presets.bm25(corpus), queries))
    with pytest.raises(KolmValueError, match="would rebuild the given BM25Retriever"):
        presets.bm25(sparse, k1=0.9)


def test_what_is_not_saved_is_asked_for_and_what_cannot_be_is_refused(corpus: DocumentTable, lsa: LSAEmbedder,
                                                                      tmp_path: Path) -> None:
    client = presets.bm25(corpus)
    client.modules.reranker = MMRReranker(lsa)
    client.save(tmp_path / "c")
    assert json.loads((tmp_path / "c" / "client.json").read_text())["pass_at_load"] == ["reranker"]
    with pytest.raises(KolmValueError, match=r"had \['reranker'\].*reranker=\.\.\."):
        SearchClient.load(tmp_path / "c")
    assert SearchClient.load(tmp_path / "c", reranker=MMRReranker(lsa)).modules.reranker is not None

    class Mine:
        def retrieve(self, context: Any) -> list[Any]:
            return []

    custom = SearchClient({"planner": client.modules.planner, "retriever": Mine()})
    with pytest.raises(KolmTypeError, match="cannot save a retriever of type Mine"):
        custom.save(tmp_path / "custom")
    assert not (tmp_path / "custom" / "client.json").exists() and not list((tmp_path / "custom").iterdir())
    with pytest.raises(KolmValueError, match="holds no saved client"):
        SearchClient.load(tmp_path / "custom")


def test_a_failed_re_save_leaves_the_old_client(corpus: DocumentTable, cranfield: dict[str, pd.DataFrame],
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kolm_search.contract.client_store as store

    old = presets.bm25(corpus)
    old.save(tmp_path / "c")
    first = json.loads((tmp_path / "c" / "client.json").read_text())["folder"]
    new = presets.bm25(corpus, k1=0.5)

    def fail(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store, "_switch", fail)  # the new index is written, the manifest cannot be switched
    with pytest.raises(OSError, match="disk full"):
        new.save(tmp_path / "c")
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["client.json", first]  # the new files removed
    queries = cranfield["queries"]
    pd.testing.assert_frame_equal(_run(SearchClient.load(tmp_path / "c"), queries), _run(old, queries))
    new.save(tmp_path / "c")  # a save that completes replaces it and removes the old index
    assert first not in {p.name for p in (tmp_path / "c").iterdir()}
    pd.testing.assert_frame_equal(_run(SearchClient.load(tmp_path / "c"), queries), _run(new, queries))
