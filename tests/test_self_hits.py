"""BEIR's self-hits: dropped before scoring exactly as BEIR's EvaluateRetrieval does (the oracle:
its procedure, pop ``qid == pid`` then pytrec_eval), on for BEIR datasets, printed by the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import Experiment, KolmTypeError, compare, evaluate
from kolm_search.cli import main
from kolm_search.evaluation.self_hits import drop_self_hits, self_hit_mask
from kolm_search.io import load_beir, load_dataset

MEASURES = {"ndcg_cut_10": "ndcg@10", "map": "map", "recall_5": "recall@5", "recip_rank": "mrr"}


def beir_oracle(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, dict[str, float]]:
    """BEIR's evaluate(ignore_identical_ids=True): pop identical ids, then pytrec_eval."""
    results: dict[str, dict[str, float]] = {}
    for q, d, s in run[["qid", "doc_id", "score"]].itertuples(index=False, name=None):
        results.setdefault(str(q), {})[str(d)] = float(s)
    for qid, rels in results.items():
        for pid in list(rels):
            if qid == pid:
                results[qid].pop(pid)
    judged: dict[str, dict[str, int]] = {}
    for q, d, v in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None):
        judged.setdefault(str(q), {})[str(d)] = int(v)
    return pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10", "map", "recall.5", "recip_rank"}).evaluate(results)


ids = st.sampled_from([str(i) for i in range(8)])
run_rows = st.lists(st.tuples(ids, ids, st.sampled_from([0.5, 1.0, 2.0, 3.0, 1.5])), min_size=1, max_size=40)
qrel_rows = st.lists(st.tuples(ids, ids, st.integers(0, 2)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(run_rows, qrel_rows)
def test_matches_beirs_procedure(rrows: list[Any], qrows: list[Any]) -> None:
    run = pd.DataFrame(rrows, columns=["qid", "doc_id", "score"]).drop_duplicates(["qid", "doc_id"])
    qrels = pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]).drop_duplicates(["qid", "doc_id"])
    want = beir_oracle(run, qrels)
    got = evaluate(run, qrels, list(MEASURES.values()), per_query=True, drop_self_hits=True)
    assert isinstance(got, pd.DataFrame)
    # pytrec_eval skips a query left with no document, as evaluate does
    assert sorted(got["qid"]) == sorted(q for q in want)
    for row in got.itertuples(index=False):
        for trec, ours in MEASURES.items():
            assert abs(row[1 + list(MEASURES.values()).index(ours)] - want[row.qid][trec]) <= 1e-12


@settings(max_examples=60, deadline=None)
@given(run_rows, st.integers(1, 4), st.booleans())
def test_drop_self_hits_against_brute_force(rrows: list[Any], limit: int, with_rank: bool) -> None:
    run = pd.DataFrame(rrows, columns=["qid", "doc_id", "score"]).drop_duplicates(["qid", "doc_id"]).reset_index(drop=True)
    if with_rank:
        run["rank"] = run.sort_values(["qid", "score"], ascending=[True, False], kind="stable").groupby("qid").cumcount()
    out, n = drop_self_hits(run, limit)
    assert n == sum(q == d for q, d in zip(run.qid, run.doc_id, strict=True))
    assert not self_hit_mask(out).any()
    for q, group in run.groupby("qid"):
        others = group[group.qid != group.doc_id]
        key = others.sort_values("rank" if with_rank else "score", ascending=with_rank, kind="stable")
        expected = list(key.doc_id[:limit])
        got = out[out.qid == q]
        if with_rank:
            got = got.sort_values("rank")
            assert list(got["rank"]) == list(range(len(got)))
        assert sorted(got.doc_id) == sorted(expected)
    same, none = drop_self_hits(run[run.qid != run.doc_id])
    assert none == 0 and same is not run


def _beir_folder(root: Path, name: str) -> Path:
    """An ArguAna-like collection: each query is a document of the corpus under its own id."""
    folder = root / name
    (folder / "qrels").mkdir(parents=True)
    topics = ["solar power cost", "wind turbine noise", "nuclear waste storage", "coal mining jobs",
              "hydro dam fish", "battery recycling", "carbon tax revenue", "electric car range"]
    docs = [{"_id": f"a{i}", "title": "", "text": t} for i, t in enumerate(topics)]
    docs += [{"_id": f"c{i}", "title": "", "text": f"counter argument about {t}"} for i, t in enumerate(topics)]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    queries = [{"_id": f"a{i}", "text": t} for i, t in enumerate(topics)]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    rows = "".join(f"a{i}\tc{i}\t1\n" for i in range(len(topics)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder


def test_flag_on_for_beir_datasets_and_carried_by_the_qrels(tmp_path: Path) -> None:
    argu = load_beir(_beir_folder(tmp_path, "arguana"))
    own = load_beir(_beir_folder(tmp_path, "mycollection"))
    assert argu.drop_self_hits and not own.drop_self_hits and "self-hits dropped" in repr(argu)
    assert not load_dataset("cranfield").drop_self_hits
    run = pd.DataFrame({"qid": ["a0", "a0", "a1", "a1"], "doc_id": ["a0", "c0", "a1", "c1"], "score": [9.0, 1.0, 9.0, 1.0]})
    dropped = evaluate(run, argu.qrels, ["mrr"], drop_self_hits=True)
    kept = evaluate(run, argu.qrels, ["mrr"], drop_self_hits=False)
    assert dropped == {"mrr": 1.0} and kept == {"mrr": 0.5}
    assert evaluate(run, argu.qrels, ["mrr"]) == dropped == evaluate(run, argu, ["mrr"])
    assert evaluate(run, argu.qrels[argu.qrels.qid != "zz"], ["mrr"]) == dropped  # survives a selection
    assert evaluate(run, own.qrels, ["mrr"]) == kept
    own.drop_self_hits = True
    assert evaluate(run, own.qrels, ["mrr"]) == dropped
    table = compare({"x": run, "y": run.assign(score=-run.score)}, argu.qrels, ["mrr"])
    assert table.loc[table.run == "x", "mean"].iloc[0] == 1.0 and table.attrs["compare"]["self_hits_dropped"]
    assert "as BEIR does" in table.to_markdown()
    with pytest.raises(KolmTypeError, match="drop_self_hits"):
        evaluate(run, argu.qrels, ["mrr"], drop_self_hits="yes")  # type: ignore[arg-type]


class _SelfFirst:
    """A pipeline that ranks the query's own id first, then the rest by a fixed order."""

    def __init__(self, doc_ids: list[str]) -> None:
        self.doc_ids = doc_ids
        self.limits: list[int] = []

    def search_batch(self, queries: pd.DataFrame, limit: int = 10, **kw: Any) -> Any:
        self.limits.append(limit)
        rows = []
        for q in queries["qid"]:
            mate = "c" + q[1:]  # the relevant document, right after the query's own
            order = [q, mate] + [d for d in self.doc_ids if d not in (q, mate)]
            rows += [(q, d, r, float(len(order) - r)) for r, d in enumerate(order[:limit])]
        frame = pd.DataFrame(rows, columns=["qid", "doc_id", "rank", "score"])

        class Result:
            run = frame
        return Result()


def test_experiment_searches_one_more_and_drops(tmp_path: Path) -> None:
    ds = load_beir(_beir_folder(tmp_path, "quora"))
    client = _SelfFirst(sorted(ds.corpus["id"]))
    exp = Experiment({"self": client}, ds, ["ndcg@10", "mrr"], limit=5, progress=False)
    table = exp.run()
    assert client.limits == [6]
    run = exp.runs["self"]
    assert not self_hit_mask(run).any() and run.groupby("qid").size().eq(5).all()
    raw = client.search_batch(ds.judged_queries(), limit=6).run
    want = beir_oracle(raw, ds.qrels)
    for metric, trec in (("ndcg@10", "ndcg_cut_10"), ("mrr", "recip_rank")):
        got = table.loc[table.metric == metric, "mean"].iloc[0]
        assert abs(got - np.mean([v[trec] for v in want.values()])) <= 1e-12
    assert table.loc[table.metric == "mrr", "mean"].iloc[0] == 1.0
    keep = Experiment({"self": _SelfFirst(sorted(ds.corpus["id"]))}, ds, ["mrr"], limit=5, progress=False,
                      drop_self_hits=False)
    assert keep.run()["mean"].iloc[0] == 0.5


def test_cli_eval_says_it_dropped_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _beir_folder(tmp_path, "arguana")
    out = tmp_path / "run.trec"
    assert main(["eval", str(folder), "--metrics", "mrr", "--limit", "3", "--quiet", "--run-out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "dropped 8 self-hits" in captured.err  # every query finds itself first with BM25
    dropped = float(captured.out.split()[-1])
    assert main(["eval", str(folder), "--metrics", "mrr", "--limit", "3", "--quiet", "--self-hits", "keep"]) == 0
    captured = capsys.readouterr()
    assert "before scoring" not in captured.err and float(captured.out.split()[-1]) < dropped
    from kolm_search import read_run

    run = read_run(out)
    assert not self_hit_mask(run).any() and run.groupby("qid", observed=True).size().max() <= 3 and run.qid.nunique() == 8
    assert main(["eval", str(_beir_folder(tmp_path, "own")), "--metrics", "mrr", "--quiet"]) == 0
    assert "before scoring" not in capsys.readouterr().err
