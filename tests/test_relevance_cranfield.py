"""Relevance on Cranfield: kolm_search's BM25 matches bm25s's nDCG@10 (~0.373) to 3 decimals."""

from __future__ import annotations

import bm25s
import numpy as np
import pandas as pd
import pytrec_eval
import Stemmer

from kolm_search import presets


def evaluate(run: dict[str, dict[str, float]], qrels: pd.DataFrame) -> tuple[float, float]:
    q: dict[str, dict[str, int]] = {}
    for qid, doc, rel in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None):
        q.setdefault(str(qid), {})[str(doc)] = int(rel)
    res = pytrec_eval.RelevanceEvaluator(q, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    return float(np.mean([v["ndcg_cut_10"] for v in res.values()])), float(np.mean([v["recall_100"] for v in res.values()]))


def test_bm25_matches_bm25s_ndcg(cranfield: dict[str, pd.DataFrame]) -> None:
    corpus, queries, qrels = cranfield["corpus"], cranfield["queries"], cranfield["qrels"]
    run_df = presets.bm25(corpus).search_batch(queries, limit=100).run
    ours: dict[str, dict[str, float]] = {}
    for qid, doc, score in run_df[["qid", "doc_id", "score"]].itertuples(index=False, name=None):
        ours.setdefault(qid, {})[doc] = float(score)
    stem = Stemmer.Stemmer("english")
    texts = [f"{t} {c}" if t else c for t, c in zip(corpus.title, corpus.content, strict=True)]
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    model.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
    docs, scores = model.retrieve(bm25s.tokenize(list(queries["query"]), stopwords="en", stemmer=stem, show_progress=False),
                                  k=100, show_progress=False)
    theirs = {qid: {corpus.id[d]: float(s) for d, s in zip(dd, ss, strict=True)}
              for qid, dd, ss in zip(queries.qid, docs, scores, strict=True)}
    ndcg, recall = evaluate(ours, qrels)
    ndcg_ref, recall_ref = evaluate(theirs, qrels)
    assert round(ndcg, 3) == round(ndcg_ref, 3)
    assert abs(ndcg - 0.373) < 0.002
    assert abs(recall - recall_ref) < 1e-3
