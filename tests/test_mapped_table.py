"""Memory-mapped document tables (kolm_search.engine.mapped_table) against the in-memory table
of the same rows (``DocumentTable.load`` of the parquet ``save`` writes: the oracle), and the
errors a damaged documents file gives."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import KolmError, KolmValueError
from kolm_search._kernels import load
from kolm_search.engine import mapped_table
from kolm_search.engine.doc_fields import concat_strings
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.mapped_table import DocumentsWriter, MappedDocumentTable, in_memory, write_documents

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_doc = st.fixed_dictionaries({
    "content": _text,
    "title": st.none() | _text,
    "source": st.none() | st.sampled_from(["a", "b", ""]),
    "tags": st.none() | st.lists(st.sampled_from(["x", "y", "z"]), max_size=3),
    "metadata": st.none() | st.dictionaries(st.sampled_from(["k", "n", "year"]), st.integers(0, 9) | _text, max_size=2),
})


def _table(docs: list[dict[str, Any]]) -> DocumentTable:
    return DocumentTable.from_documents([{"id": f"d{i}-{d['content'][:3]}", **d} for i, d in enumerate(docs)])


def _pair(table: DocumentTable, tmp: Path) -> tuple[MappedDocumentTable, DocumentTable]:
    """The table as a documents file, mapped, and as the parquet table a save writes, loaded."""
    write_documents(table, tmp / "documents.arrow")
    table.save(tmp / "documents.parquet")
    return MappedDocumentTable(tmp / "documents.arrow", n_docs=len(table)), DocumentTable.load(tmp / "documents.parquet")


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped_table, "BATCH_ROWS", 3)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(_doc, min_size=1, max_size=25), data=st.data())
def test_every_accessor_equals_the_in_memory_table(tmp_path_factory: pytest.TempPathFactory, small_batches: None,
                                                   docs: list[dict[str, Any]], data: st.DataObject) -> None:
    tmp = tmp_path_factory.mktemp("t")
    mapped, oracle = _pair(_table(docs), tmp)
    n = len(oracle)
    assert len(mapped) == n and len(mapped._batches) == -(-n // 3)
    codes = np.asarray(data.draw(st.lists(st.integers(0, n - 1), max_size=30)), np.int64)  # repeats, any order
    got, want = mapped.ids_of(codes), oracle.ids_of(codes)
    assert got.dtype == want.dtype and list(got) == list(want)
    scores = np.arange(len(codes), dtype=np.float64)
    assert mapped.documents(codes, scores) == oracle.documents(codes, scores)
    for fields in (("title", "content"), ("content",), ("source", "title"), ()):
        assert mapped.texts(fields) == oracle.texts(fields)
    asked = [*oracle.ids[codes].tolist(), "absent", 7, None]
    assert mapped.codes(asked, missing="ignore").tolist() == oracle.codes(asked, missing="ignore").tolist()
    with pytest.raises(KolmValueError, match="unknown document id"):
        mapped.codes(["absent"])
    rows = np.unique(codes)
    assert mapped.take(rows).frame.equals(oracle.take(rows).frame)
    assert mapped.digest() == oracle.digest() == _table(docs).digest()
    for flt in ({"source": "a"}, {"tags": "x"}, {"year": {"$gte": 3}}, {"k": {"$exists": True}}):
        assert _outcome(mapped, flt) == _outcome(oracle, flt)  # the mask, or the same error
    assert mapped.frame.equals(oracle.frame) and mapped.ids.tolist() == oracle.ids.tolist()
    back = pickle.loads(pickle.dumps(mapped))
    assert back.documents(codes) == oracle.documents(codes)
    assert in_memory(MappedDocumentTable(tmp / "documents.arrow")).frame.equals(oracle.frame)


def _outcome(table: DocumentTable, flt: dict[str, Any]) -> Any:
    try:
        return table.filter_mask(flt).tolist()
    except KolmError as exc:  # no document has the field, values of mixed types: the same error
        return type(exc).__name__, str(exc)


def test_rows_are_read_only_from_the_batches_asked_for(tmp_path: Path, small_batches: None) -> None:
    table = _table([{"content": f"c{i}", "title": None, "source": None, "tags": None, "metadata": None}
                    for i in range(12)])
    write_documents(table, tmp_path / "d.arrow")
    mapped = MappedDocumentTable(tmp_path / "d.arrow")
    assert len(mapped) == 12 and not mapped._checked.any()  # opening reads no column
    mapped.ids_of([7, 4])
    assert mapped._checked[0].tolist() == [False, True, True, False]  # the id column of batches 1 and 2
    mapped.documents([0])
    assert mapped._checked[:, 0].all() and not mapped._checked[:, 3].any()


def test_batches_are_cut_by_bytes_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped_table, "BATCH_BYTES", 100)
    table = _table([{"content": "x" * 60, "title": None, "source": None, "tags": None, "metadata": None}
                    for _ in range(5)] + [{"content": "y" * 500, "title": None, "source": None, "tags": None,
                                           "metadata": None}])
    write_documents(table, tmp_path / "d.arrow")
    mapped = MappedDocumentTable(tmp_path / "d.arrow")
    assert [b.num_rows for b in mapped._batches] == [1, 1, 1, 1, 1, 1]  # ~64 bytes a row: one a batch
    assert mapped.texts(("content",)) == table.texts(("content",))


def test_writer_appends_tables_one_after_the_other(tmp_path: Path) -> None:
    parts = [_table([{"content": f"p{p} {i}", "title": None, "source": None, "tags": None, "metadata": None}
                     for i in range(4)]) for p in range(3)]
    parts = [DocumentTable.from_frame(t.frame.assign(id=[f"{p}-{i}" for i in range(4)])) for p, t in enumerate(parts)]
    with DocumentsWriter(tmp_path / "d.arrow") as writer:
        for t in parts:
            writer.write(t)
    mapped = MappedDocumentTable(tmp_path / "d.arrow", n_docs=12)
    assert mapped.texts() == DocumentTable.concat(parts).texts()


def test_hash_collisions_are_told_apart_by_the_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id hashed alike: the lookup compares the ids themselves."""
    strings = load("strings")
    monkeypatch.setattr(strings, "hash_all", lambda offsets, data, out: out.fill(42))
    table = _table([{"content": f"c{i}", "title": None, "source": None, "tags": None, "metadata": None}
                    for i in range(9)])
    write_documents(table, tmp_path / "d.arrow")
    mapped = MappedDocumentTable(tmp_path / "d.arrow")
    asked = [table.ids[5], table.ids[0], "nope", table.ids[8]]
    assert mapped.codes(asked, missing="ignore").tolist() == [5, 0, -1, 8]


def _write_raw(path: Path, columns: dict[str, list[Any]]) -> None:
    schema = pa.schema([(c, pa.string()) for c in ("id", "content", "title", "source", "tags", "metadata")])
    table = pa.table({c: pa.array(columns.get(c, [None] * len(columns["id"])), pa.string()) for c in schema.names},
                     schema=schema)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table, max_chunksize=2)


@pytest.mark.parametrize("columns, call, match", [
    ({"id": ["a", "b", "a"], "content": ["x", "y", "z"]}, "codes", r"d\.arrow: duplicate document id 'a'"),
    ({"id": ["a", "b", "a"], "content": ["x", "y", "z"]}, "check", r"d\.arrow: duplicate document id 'a'"),
    ({"id": ["a", None], "content": ["x", "y"]}, "open", r"d\.arrow: record batch 0 \(rows 0-1\): a document without 'id'"),
    ({"id": ["a", "b", "c"], "content": ["x", "y", None]}, "open", r"record batch 1 \(rows 2-2\): .*without 'content'"),
    ({"id": ["a", "b", "c"], "content": ["x", "y", "z"], "tags": [None, None, "{not json"]}, "documents",
     r"d\.arrow: row 2: field 'tags' is not JSON"),
    ({"id": ["a", "b", "c"], "content": ["x", "y", "z"], "metadata": [None, "[1]", None]}, "check",
     r"d\.arrow: row 1: field 'metadata' must be a JSON object"),
])
def test_bad_documents_files_are_refused_naming_the_file(tmp_path: Path, columns: dict[str, list[Any]], call: str,
                                                         match: str) -> None:
    path = tmp_path / "d.arrow"
    _write_raw(path, columns)
    with pytest.raises(KolmValueError, match=match):
        mapped = MappedDocumentTable(path)
        if call == "codes":
            mapped.codes(["a"])
        elif call == "check":
            mapped.check()
        elif call == "documents":
            mapped.documents([0, 1, 2])


def test_invalid_text_in_one_batch_is_refused_when_that_batch_is_read(tmp_path: Path) -> None:
    path = tmp_path / "d.arrow"
    _write_raw(path, {"id": ["a", "b", "c", "d"], "content": ["fine", "good", "BROKEN", "okay"]})
    path.write_bytes(path.read_bytes().replace(b"BROKEN", b"\xff\xfeOKEN"))  # not UTF-8
    mapped = MappedDocumentTable(path)
    assert [d.content for d in mapped.documents([0, 1])] == ["fine", "good"]  # batch 0 is sound
    with pytest.raises(KolmValueError, match=r"d\.arrow: record batch 1 \(rows 2-3\): column 'content' is damaged"):
        mapped.documents([3])


@pytest.mark.parametrize("content, match", [
    (b"", "not a readable documents file"), (b"ARROW1 but not really", "not a readable documents file")])
def test_files_that_are_not_documents_files(tmp_path: Path, content: bytes, match: str) -> None:
    (tmp_path / "d.arrow").write_bytes(content)
    with pytest.raises(KolmValueError, match=match):
        MappedDocumentTable(tmp_path / "d.arrow")


def test_another_schema_or_row_count_is_refused(tmp_path: Path) -> None:
    table = pa.table({"id": ["a"], "text": ["x"]})
    with pa.OSFile(str(tmp_path / "d.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(KolmValueError, match="holds the string columns"):
        MappedDocumentTable(tmp_path / "d.arrow")
    write_documents(_table([{"content": "x", "title": None, "source": None, "tags": None, "metadata": None}]),
                    tmp_path / "e.arrow")
    with pytest.raises(KolmValueError, match=r"holds 1 documents; manifest.json key 'n_docs' says 2"):
        MappedDocumentTable(tmp_path / "e.arrow", n_docs=2)


def test_codes_out_of_range_raise(tmp_path: Path) -> None:
    write_documents(_table([{"content": "x", "title": None, "source": None, "tags": None, "metadata": None}]),
                    tmp_path / "d.arrow")
    mapped = MappedDocumentTable(tmp_path / "d.arrow")
    with pytest.raises(IndexError, match=r"document codes must lie in \[0, 1\)"):
        mapped.ids_of([1])
    with pytest.raises(IndexError):
        mapped.documents([-1])


def test_concat_strings_keeps_the_values_and_widens_only_when_it_must() -> None:
    small, large = pa.array(["a", None, "bc"]), pa.array(["d", ""], pa.large_string())
    assert concat_strings([small, small]).type == pa.string()
    assert concat_strings([small, small]).to_pylist() == ["a", None, "bc", "a", None, "bc"]
    mixed = concat_strings([small, large])
    assert mixed.type == pa.large_string() and mixed.to_pylist() == ["a", None, "bc", "d", ""]
    assert concat_strings([small]) is small
    empty = concat_strings([])
    assert empty.type == pa.large_string() and len(empty) == 0
