"""Embedding throughput of OnnxEmbedder (packaged MiniLM int8) on short and long texts, and
batch re-ranking (MMR) against the time to embed the run's distinct documents once.

Rerun: ``python benchmarks/bench_embed.py`` (extra ``onnx``). Rows:

- ``OnnxEmbedder.embed_many`` on a corpus of Cranfield abstracts, titles and queries in random
  order (long and short texts mixed), against a plain onnxruntime loop over length-sorted
  batches of the same model (the target: at least 0.9x its speed) and against the way
  kolm_search embedded before (batches of 64 in corpus order padded to their longest text,
  onnxruntime's default threads; the target: at least 2x it);
- ``rerank_run`` with MMR of 100 queries x top-100 of a BM25 run, against embedding the run's
  distinct documents once with the same embedder (the target: within 1.3x).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import header, median_time, median_times, report


def mixed_corpus(n: int, seed: int = 0) -> list[str]:
    from kolm_search.engine.doctable import DocumentTable
    from kolm_search.io import load_dataset

    ds = load_dataset("cranfield")
    long = DocumentTable.from_frame(ds.corpus).texts()
    short = [t for t in ds.corpus["title"] if isinstance(t, str)] + list(ds.queries["query"])
    rng = np.random.default_rng(seed)
    texts = [long[i] for i in rng.choice(len(long), n // 3, replace=False)]
    texts += [short[i] for i in rng.choice(len(short), n - n // 3, replace=False)]
    return [texts[i] for i in rng.permutation(len(texts))]


def plain_sorted_loop(session: object, tokenizer: object, texts: list[str], batch: int) -> np.ndarray:
    """The reference: onnxruntime on length-sorted batches, mean pooling, nothing else."""
    enc = tokenizer.encode_batch(texts)  # type: ignore[attr-defined]
    order = np.argsort([len(e.ids) for e in enc], kind="stable")
    out = np.empty((len(texts), 384), np.float32)
    for start in range(0, len(texts), batch):
        rows = order[start:start + batch]
        width = max(len(enc[i].ids) for i in rows)
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for r, i in enumerate(rows):
            ids[r, :len(enc[i].ids)] = enc[i].ids
            mask[r, :len(enc[i].ids)] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,  # type: ignore[attr-defined]
                                    "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[:, :, None]
        out[rows] = (hidden * m).sum(axis=1) / m.sum(axis=1)
    return out


def old_way(model: str, tokenizer_path: str, texts: list[str]) -> np.ndarray:
    """Before: corpus order, batches of 64 padded to their longest text, default threads."""
    import onnxruntime as ort
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(tokenizer_path)
    tok.enable_truncation(max_length=256)
    tok.enable_padding()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    out = []
    for start in range(0, len(texts), 64):
        enc = tok.encode_batch(texts[start:start + 64])
        ids = np.array([e.ids for e in enc], np.int64)
        mask = np.array([e.attention_mask for e in enc], np.int64)
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[:, :, None]
        out.append((hidden * m).sum(axis=1) / m.sum(axis=1))
    return np.concatenate(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--texts", type=int, default=600)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import onnxruntime as ort
    import tokenizers

    from kolm_search import presets
    from kolm_search.adapters import MMRReranker, OnnxEmbedder, packaged_minilm_onnx
    from kolm_search.io import load_dataset
    from kolm_search.jobs.rerank import rerank_run

    model, tok_path = packaged_minilm_onnx()
    texts = mixed_corpus(args.texts)
    header(f"MiniLM int8 ONNX on {len(texts)} mixed short and long texts; rerank {args.queries} queries x top-100")
    emb = OnnxEmbedder(model, tok_path, batch_size=32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = len(os.sched_getaffinity(0))
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    tok = tokenizers.Tokenizer.from_file(str(tok_path))
    tok.enable_truncation(max_length=256)
    tok.no_padding()  # the file pads to 128 by default
    calls = {"ours": lambda: emb.embed_many(texts), "plain": lambda: plain_sorted_loop(session, tok, texts, 32),
             "old": lambda: old_way(str(model), str(tok_path), texts)}
    t = median_times(calls, args.repeat, warmup=0)  # rounds: each call once a round, against this VM's drift
    t_ours, t_plain, t_old = t["ours"], t["plain"], t["old"]
    ours, plain, old = (calls[k]() for k in ("ours", "plain", "old"))
    plain /= np.linalg.norm(plain, axis=1, keepdims=True)
    old /= np.linalg.norm(old, axis=1, keepdims=True)
    rows = [{"what": "OnnxEmbedder.embed_many", "seconds": t_ours, "texts_per_s": f"{len(texts) / t_ours:.1f}"},
            {"what": "plain onnxruntime loop, length-sorted batches", "seconds": t_plain,
             "ours_vs_plain": f"{t_plain / t_ours:.2f}x", "min_cosine": f"{float((ours * plain).sum(1).min()):.5f}"},
            {"what": "before: corpus-order batches of 64, default threads", "seconds": t_old,
             "ours_speedup": f"{t_old / t_ours:.2f}x", "min_cosine": f"{float((ours * old).sum(1).min()):.5f}"}]
    # batch re-ranking against embedding the run's distinct documents once
    ds = load_dataset("cranfield")
    queries = ds.queries.head(args.queries)
    run = presets.bm25(ds.corpus).search_batch(queries, limit=100).run
    docs = ds.corpus.set_index("id").loc[run["doc_id"].unique()]
    distinct = [f"{t} {c}" if isinstance(t, str) and t else c for t, c in zip(docs["title"], docs["content"], strict=True)]
    t_embed, _ = median_time(lambda: emb.embed_many(distinct), 1, 0)
    t0 = time.perf_counter()
    rerank_run(run, ds, MMRReranker(emb, lambda_=0.7), top_k=100, progress=False)
    t_rerank = time.perf_counter() - t0
    rows.append({"what": f"embed the run's {len(distinct)} distinct documents once", "seconds": t_embed})
    rows.append({"what": f"rerank_run, MMR, {len(queries)} queries x top-100", "seconds": t_rerank,
                 "vs_embedding_once": f"{t_rerank / t_embed:.2f}x"})
    report(rows)


if __name__ == "__main__":
    main()
