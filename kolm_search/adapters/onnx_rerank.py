"""``OnnxCrossEncoderReranker``: any cross-encoder exported to ONNX, no torch (extra ``onnx``).

The folder holds the exported model (``model.onnx``: inputs ``input_ids``, ``attention_mask``
and optionally ``token_type_ids``; first output the logits, ``(batch, labels)``) and its
``tokenizer.json``. Each (query, document) pair is tokenised as a pair, truncated longest
first to ``max_length`` tokens as sentence-transformers' ``CrossEncoder`` does; pairs are
ordered by length and batched in that order (each batch padded to its own longest), as
:class:`~kolm_search.adapters.OnnxEmbedder` does. The score is the first logit after the
model's activation: the one its ``config.json`` names (sentence-transformers writes
``sentence_transformers.activation_fn``), else a sigmoid for a single logit, as
``CrossEncoder`` applies by default, so scores equal ``CrossEncoderReranker``'s on the same weights.

Export a model with ``torch.onnx.export`` (or ``optimum-cli export onnx``) and copy its
``tokenizer.json`` beside it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kolm_search._extras import require
from kolm_search._params import one_of, path_exists, positive_int
from kolm_search._progress import progress_bar
from kolm_search.adapters._fingerprint import describe, file_digest
from kolm_search.adapters.onnx import onnx_session, padded_feed
from kolm_search.adapters.scorecache import ScoreCache
from kolm_search.adapters.scoring import PointwiseReranker
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument

__all__ = ["OnnxCrossEncoderReranker"]

Activation = Literal["auto", "sigmoid", "identity"]
_NAMED = {"Sigmoid": "sigmoid", "Identity": "identity"}


def _config_activation(folder: Path) -> str | None:
    """The activation ``config.json`` names (``None`` when it names none)."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise KolmValueError(f"{path} is not JSON ({exc})") from exc
    st = config.get("sentence_transformers") if isinstance(config, dict) else None
    name = st.get("activation_fn") if isinstance(st, dict) else None
    if name is None:
        return None
    found = _NAMED.get(str(name).rsplit(".", 1)[-1])
    if found is None:
        raise KolmValueError(f"{path} names the activation {name!r}; pass activation='sigmoid' or 'identity'")
    return found


def _max_length(folder: Path) -> int:
    """``model_max_length`` of ``tokenizer_config.json`` when it is a real limit, else 512."""
    try:
        found = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("model_max_length")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return 512
    return int(found) if isinstance(found, int) and 0 < found <= 100_000 else 512


class OnnxCrossEncoderReranker(PointwiseReranker):
    """A cross-encoder on ONNX Runtime: scores (query, document) pairs (see the module docstring).

    Parameters
    ----------
    model_dir : path
        Holds ``model_file`` and ``tokenizer.json``.
    model_file : str, default "model.onnx"
    max_length : int, optional
        Tokens per pair (default: ``tokenizer_config.json``'s ``model_max_length``, else 512).
    batch_size : int, default 32
    activation : {"auto", "sigmoid", "identity"}, default "auto"
    n_threads : int, optional
        ONNX Runtime intra-op threads (default: every usable core).
    score_cache : ScoreCache, optional
    """

    def __init__(self, model_dir: str | Path, *, model_file: str = "model.onnx", max_length: int | None = None,
                 batch_size: int = 32, activation: Activation = "auto", n_threads: int | None = None,
                 score_cache: ScoreCache | None = None) -> None:
        tokenizers = require("tokenizers", "onnx")
        folder = path_exists("model_dir", model_dir, kind="dir")
        self.model_path = path_exists("model_file", folder / model_file, kind="file")
        self.tokenizer_path = path_exists("tokenizer.json", folder / "tokenizer.json", kind="file")
        one_of("activation", activation, ("auto", "sigmoid", "identity"))
        self.activation = _config_activation(folder) if activation == "auto" else activation
        self.max_length = positive_int("max_length", max_length) if max_length is not None else _max_length(folder)
        self.batch_size = positive_int("batch_size", batch_size)
        self.tokenizer = tokenizers.Tokenizer.from_file(str(self.tokenizer_path))
        self.tokenizer.enable_truncation(max_length=self.max_length, strategy="longest_first")
        self.tokenizer.no_padding()
        self.session: Any = onnx_session(self.model_path, n_threads)
        self.inputs = {i.name for i in self.session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self.inputs
        if missing:
            raise KolmValueError(f"{self.model_path} takes inputs {sorted(self.inputs)}; a cross-encoder needs "
                                 f"{sorted(missing)} too")
        self.score_cache = score_cache

    def fingerprint(self) -> str:
        """The model and tokenizer files (sha256), the maximum length and the activation."""
        return describe("OnnxCrossEncoderReranker", model=file_digest(self.model_path),
                        tokenizer=file_digest(self.tokenizer_path), max_length=self.max_length,
                        activation=self.activation)

    def _logits(self, encodings: list[Any]) -> npt.NDArray[np.float32]:
        out = np.asarray(self.session.run(None, padded_feed(encodings, self.inputs))[0], dtype=np.float32)
        if out.ndim == 1:
            out = out[:, None]
        if out.ndim != 2 or out.shape[0] != len(encodings):
            raise KolmValueError(f"{self.model_path} returned logits of shape {out.shape} for {len(encodings)} pairs")
        activation = self.activation or ("sigmoid" if out.shape[1] == 1 else "identity")
        first = out[:, 0]
        return (1.0 / (1.0 + np.exp(-first))).astype(np.float32) if activation == "sigmoid" else first

    def score_pairs(self, pairs: Sequence[tuple[str, SearchDocument]]) -> npt.NDArray[np.float32]:
        """The model's score of each (query, document title and content) pair: float32 (n,)."""
        if not pairs:
            return np.zeros(0, np.float32)
        texts = [(q, f"{d.title} {d.content}" if d.title else d.content) for q, d in pairs]
        encodings = self.tokenizer.encode_batch(texts)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        out = np.empty(len(texts), np.float32)
        with progress_bar(len(texts), "cross-encoder", "pair") as bar:
            for start in range(0, len(texts), self.batch_size):
                rows = order[start:start + self.batch_size]
                out[rows] = self._logits([encodings[i] for i in rows])
                bar.update(len(rows))
        if not np.all(np.isfinite(out)):
            raise KolmValueError(f"{self.model_path} returned non-finite scores")
        return out

    def __repr__(self) -> str:
        return f"OnnxCrossEncoderReranker({str(self.model_path.parent)!r})"
