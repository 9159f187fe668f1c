"""OnnxCrossEncoderReranker equals CrossEncoderReranker on the same weights: a small randomly
initialised BertForSequenceClassification built here and exported with torch.onnx.export (no
cross-encoder weights are packaged). Skipped without torch, sentence-transformers, onnxruntime
and onnx."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("onnxruntime", reason="extra 'onnx' not installed")
pytest.importorskip("onnx", reason="torch.onnx.export needs the onnx package (extra 'test')")
st = pytest.importorskip("sentence_transformers", reason="extra 'embeddings' not installed")
torch = pytest.importorskip("torch", reason="extra 'embeddings' not installed")

from kolm_search import KolmValueError  # noqa: E402
from kolm_search.adapters import CrossEncoderReranker, OnnxCrossEncoderReranker, packaged_minilm_path  # noqa: E402
from kolm_search.jobs.rerank import rerank_run  # noqa: E402
from kolm_search.types import SearchDocument  # noqa: E402


def export(folder: Path, activation: str | None = None) -> Path:
    """A tiny cross-encoder saved for sentence-transformers and exported to ONNX beside it."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(3)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1, attn_implementation="eager")
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    src = packaged_minilm_path()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, folder / name)
    if activation is not None:
        cfg = json.loads((folder / "config.json").read_text())
        cfg["sentence_transformers"] = {"activation_fn": activation}
        (folder / "config.json").write_text(json.dumps(cfg))
    ids = torch.ones((2, 8), dtype=torch.long)
    axes = {"batch": 0, "seq": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(folder / "model.onnx"),
                          input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
                          dynamic_axes={n: {v: k for k, v in axes.items()} for n in
                                        ("input_ids", "attention_mask", "token_type_ids")} | {"logits": {0: "batch"}},
                          dynamo=False, opset_version=17)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export(tmp_path_factory.mktemp("tiny-ce"))


TEXTS = ["wing flutter at transonic speeds " * 6, "heat transfer", "shock waves in a nozzle", "flat plate",
         "boundary layer transition on a cone with suction " * 3, "x"]
PAIRS = [(q, SearchDocument(f"d{i}", t, title="Title" if i % 2 else None)) for q in ("supersonic shock", "heat")
         for i, t in enumerate(TEXTS)]


@pytest.mark.parametrize("max_length", [None, 24])
def test_equals_the_sentence_transformers_cross_encoder(tiny: Path, max_length: int | None) -> None:
    onnx = OnnxCrossEncoderReranker(tiny, batch_size=3, max_length=max_length)
    reference = CrossEncoderReranker(tiny, batch_size=4, max_length=max_length)
    got, want = onnx.score_pairs(PAIRS), reference.score_pairs(PAIRS)
    assert got.dtype == np.float32 and got.shape == (len(PAIRS),)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(set(np.round(want, 6))) > 3  # the pairs are told apart: truncation and padding matter
    assert onnx.fingerprint() == OnnxCrossEncoderReranker(tiny, max_length=max_length).fingerprint()


def test_same_run_as_the_cross_encoder(tiny: Path, cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import presets

    queries = cranfield["queries"].head(4)
    run = presets.bm25(cranfield["corpus"]).search_batch(queries, limit=15).run
    args = {"top_k": 10, "queries": queries, "progress": False}
    got = rerank_run(run, cranfield["corpus"], OnnxCrossEncoderReranker(tiny), **args)
    want = rerank_run(run, cranfield["corpus"], CrossEncoderReranker(tiny), **args)
    assert list(got["doc_id"]) == list(want["doc_id"])
    np.testing.assert_allclose(got["score"], want["score"], rtol=1e-5, atol=1e-6)


def test_activation_named_by_the_config(tmp_path: Path) -> None:
    folder = export(tmp_path / "identity", activation="torch.nn.modules.linear.Identity")
    onnx = OnnxCrossEncoderReranker(folder)
    assert onnx.activation == "identity"
    np.testing.assert_allclose(onnx.score_pairs(PAIRS), CrossEncoderReranker(folder).score_pairs(PAIRS),
                               rtol=1e-5, atol=1e-6)
    assert OnnxCrossEncoderReranker(folder, activation="sigmoid").score_pairs(PAIRS).min() > 0


def test_bad_folders_are_named(tmp_path: Path, tiny: Path) -> None:
    with pytest.raises(KolmValueError, match="model_dir"):
        OnnxCrossEncoderReranker(tmp_path / "absent")
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(tiny / "model.onnx", partial / "model.onnx")
    with pytest.raises(KolmValueError, match="tokenizer.json"):
        OnnxCrossEncoderReranker(partial)
    shutil.copy(tiny / "tokenizer.json", partial / "tokenizer.json")
    (partial / "config.json").write_text(json.dumps({"sentence_transformers": {"activation_fn": "my.Softplus"}}))
    with pytest.raises(KolmValueError, match="Softplus"):
        OnnxCrossEncoderReranker(partial)
