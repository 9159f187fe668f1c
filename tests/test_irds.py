"""load_dataset through ir_datasets, offline: datasets registered in the test from local files
(ir_datasets' own BEIR handlers over a BEIR folder, whose load_beir frames are the oracle, and
TREC-format handlers), dispatch rules, and errors."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pandas as pd
import pytest

from kolm_search import KolmValueError, evaluate
from kolm_search.cli import main
from kolm_search.io import load_beir, load_dataset, load_irds

irds = pytest.importorskip("ir_datasets")


@pytest.fixture(autouse=True)
def _irds_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds_home"))  # nothing written to ~


def _beir_folder(root: Path) -> Path:
    folder = root / "beir_like"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "Wind", "text": "wind turbines make noise", "metadata": {"url": "http://a"}},
            {"_id": "d2", "title": "", "text": "solar panels are cheap", "metadata": {"url": "http://b"}},
            {"_id": "q1", "title": "Self", "text": "the query's own text", "metadata": {"url": ""}}]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    queries = [{"_id": "q1", "text": "wind noise", "metadata": {}}, {"_id": "q2", "text": "solar cost", "metadata": {}}]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td2\t1\nq2\td1\t0\n",
                                                encoding="utf-8")
    return folder


def _register_beir(folder: Path, prefix: str = "beir") -> str:
    """ir_datasets' own BEIR handlers (those of 'beir/scifact' etc.) over local files."""
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.datasets.beir import BeirDocs, BeirQrels, BeirQueries, BeirTitleUrlDoc
    from ir_datasets.formats import GenericQuery
    from ir_datasets.util import LocalDownload

    name = f"{prefix}/test-{uuid.uuid4().hex[:8]}"
    irds.registry.register(name, Dataset(
        BeirDocs(name, LocalDownload(folder / "corpus.jsonl"), BeirTitleUrlDoc),
        BeirQueries(name, LocalDownload(folder / "queries.jsonl"), GenericQuery),
        BeirQrels(LocalDownload(folder / "qrels" / "test.tsv"), qrels_defs={})))
    return name


def _sub(root: Path, name: str) -> Path:
    (root / name).mkdir()
    return root / name


def test_beir_handlers_give_the_frames_load_beir_gives(tmp_path: Path) -> None:
    folder = _beir_folder(tmp_path)
    name = _register_beir(folder)
    want = load_beir(folder)
    for got in (load_dataset(f"irds:{name}"), load_dataset(name), load_irds(name)):
        assert got.name == name
        pd.testing.assert_frame_equal(got.corpus, want.corpus)
        pd.testing.assert_frame_equal(got.queries, want.queries)
        pd.testing.assert_frame_equal(got.qrels, want.qrels)
        assert got.drop_self_hits  # a beir/ id: BEIR's evaluation drops self-hits
    run = pd.DataFrame({"qid": ["q1", "q1", "q2"], "doc_id": ["q1", "d1", "d2"], "score": [3.0, 2.0, 1.0]})
    assert evaluate(run, got.qrels, ["mrr"]) == {"mrr": 1.0}  # the self-hit q1 was dropped


def _register_trec(root: Path, *, qrels_text: str | None = None) -> str:
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecDocs, TrecQrels, TrecQueries
    from ir_datasets.util import LocalDownload

    (root / "docs.trec").write_text(
        "<DOC>\n<DOCNO> D1 </DOCNO>\n<TEXT>\nacid rain harms lakes\n</TEXT>\n</DOC>\n"
        "<DOC>\n<DOCNO> D2 </DOCNO>\n<TEXT>\nforests and rain\n</TEXT>\n</DOC>\n", encoding="utf-8")
    (root / "topics.trec").write_text(
        "<top>\n<num> Number: 401\n<title> acid rain\n<desc> Description:\nEffects of acid rain.\n"
        "<narr> Narrative:\nRelevant documents discuss lakes.\n</top>\n", encoding="utf-8")
    (root / "qrels.txt").write_text(qrels_text or "401 0 D1 2\n401 0 D2 0\n", encoding="utf-8")
    name = f"local-trec-{uuid.uuid4().hex[:8]}"
    irds.registry.register(name, Dataset(TrecDocs(LocalDownload(root / "docs.trec"), parser="text"),
                                         TrecQueries(LocalDownload(root / "topics.trec")),
                                         TrecQrels(LocalDownload(root / "qrels.txt"), {0: "no", 1: "yes", 2: "very"})))
    return name


def test_trec_format_dataset(tmp_path: Path) -> None:
    name = _register_trec(tmp_path)
    ds = load_dataset(name)
    assert list(ds.corpus["id"]) == ["D1", "D2"] and ds.corpus["title"].isna().all()
    assert [c.strip() for c in ds.corpus["content"]] == ["acid rain harms lakes", "forests and rain"]
    assert "metadata" not in ds.corpus.columns  # marked_up_doc is not kept
    assert ds.queries.to_dict("list") == {"qid": ["401"], "query": ["acid rain"]}  # a TREC topic's title
    assert ds.qrels.astype(str).to_dict("list") == {"qid": ["401", "401"], "doc_id": ["D1", "D2"], "relevance": ["2", "0"]}
    assert ds.qrels["relevance"].dtype == "int64" and not ds.drop_self_hits


def test_split_is_appended_and_parts_are_required(tmp_path: Path) -> None:
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecDocs
    from ir_datasets.util import LocalDownload

    name = _register_trec(tmp_path)
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    irds.registry.register(parent, Dataset(TrecDocs(LocalDownload(tmp_path / "docs.trec"), parser="text")))
    irds.registry.register(f"{parent}/test", irds.registry[name])
    with pytest.raises(KolmValueError, match=rf"provides no queries or qrels.*{parent}/test"):
        load_dataset(f"irds:{parent}")
    assert load_dataset(f"irds:{parent}", "test").name == f"{parent}/test"
    assert load_dataset(parent, split="test").name == f"{parent}/test"
    with pytest.raises(KolmValueError, match="appended"):
        load_dataset(f"irds:{parent}", "dev")


def test_errors_and_dispatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(KolmValueError, match="close ones.*beir/scifact/test"):
        load_dataset("irds:beir/scifact/tset")
    with pytest.raises(KolmValueError, match="does not exist.*irds"):
        load_dataset("beir/scifact/tset")
    with pytest.raises(KolmValueError, match="does not exist") as info:
        load_dataset("./no/such/folder")
    assert "irds" not in str(info.value)
    # a packaged name wins over the ir_datasets id of the same name
    assert "cranfield" in list(irds.registry) and load_dataset("cranfield").name == "cranfield"
    bad = _register_trec(tmp_path, qrels_text="401 0 D1 two\n")
    with pytest.raises(Exception, match=rf"{bad}.*qrels") as err:
        load_dataset(bad)
    assert isinstance(err.value, KolmValueError)
    dup = _register_trec(_sub(tmp_path, "x"), qrels_text="401 0 D1 1\n401 0 D1 2\n")
    with pytest.raises(KolmValueError, match="duplicate judgement"):
        load_dataset(dup)
    gone = _register_trec(_sub(tmp_path, "y"))
    (tmp_path / "y" / "docs.trec").unlink()
    from kolm_search import DownloadError

    with pytest.raises(DownloadError, match=rf"{gone}.*documents"):
        load_dataset(gone)
    name = _register_trec(_sub(tmp_path, "z"))
    assert main(["eval", f"irds:{name}", "--metrics", "ndcg@10", "--quiet"]) == 0
    assert name in capsys.readouterr().out


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # import fails as when not installed
    with pytest.raises(ImportError, match=r"kolm-search\[irds\]"):
        load_dataset("irds:vaswani")
