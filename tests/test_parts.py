"""Parts with a manifest (kolm_search.io.parts): each part atomic, damage never used, another
job refused by name, a killed write leaving nothing trusted."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search.errors import JobMismatchError, KolmValueError
from kolm_search.io import parts as parts_mod
from kolm_search.io.parts import PartsFolder, atomic_write, is_parts_folder

FP = {"run": "sha256:aa", "reranker": "R(x=1)", "top_k": "10"}


def frame(i: int, n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"qid": [f"q{i}"] * n, "doc_id": [f"d{j}" for j in range(n)], "rank": np.arange(n),
                         "score": np.linspace(1.0, 0.0, n) + i})


def folder(path: Path, **kw: object) -> PartsFolder:
    args = {"kind": "test", "fingerprint": FP, "n_parts": 3, **kw}
    return PartsFolder(path, **args)  # type: ignore[arg-type]


def test_write_read_resume(tmp_path: Path) -> None:
    f = folder(tmp_path / "job")
    assert is_parts_folder(tmp_path / "job") and f.done() == []
    f.write(0, frame(0))
    f.write(2, frame(2))
    again = folder(tmp_path / "job")  # a restarted job sees what is finished
    assert again.done() == [0, 2]
    with pytest.raises(KolmValueError, match="not finished: 1 of 3 parts missing"):
        again.read()
    again.write(1, frame(1))
    pd.testing.assert_frame_equal(again.read(), pd.concat([frame(i) for i in range(3)], ignore_index=True))
    pd.testing.assert_frame_equal(PartsFolder.open_existing(tmp_path / "job").read_part(1), frame(1))
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert manifest["fingerprint"] == FP and manifest["n_parts"] == 3 and manifest["kind"] == "test"


def test_another_job_is_refused_by_name_unless_restarted(tmp_path: Path) -> None:
    folder(tmp_path / "job").write(0, frame(0))
    (tmp_path / "job" / "notes.txt").write_text("mine")
    with pytest.raises(JobMismatchError, match=r"top_k differs \(recorded '10', now '20'\)") as info:
        folder(tmp_path / "job", fingerprint={**FP, "top_k": "20"})
    assert info.value.differences == {"top_k": ("10", "20")}
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, JobMismatchError) and again.differences == info.value.differences
    with pytest.raises(JobMismatchError, match="n_parts differs"):
        folder(tmp_path / "job", n_parts=4)
    with pytest.raises(JobMismatchError, match="extra differs"):
        folder(tmp_path / "job", fingerprint={**FP, "extra": "1"})
    fresh = folder(tmp_path / "job", fingerprint={**FP, "top_k": "20"}, restart=True)
    assert fresh.done() == [] and (tmp_path / "job" / "notes.txt").read_text() == "mine"  # only its own files go


def test_not_a_job_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "corpus.jsonl").write_text("{}")
    with pytest.raises(KolmValueError, match="no manifest.json: it is not a job folder"):
        folder(tmp_path / "data")
    with pytest.raises(KolmValueError, match="no manifest.json"):
        folder(tmp_path / "data", restart=True)  # never deletes what it did not write
    assert (tmp_path / "data" / "corpus.jsonl").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(KolmValueError, match="is a file"):
        folder(tmp_path / "file")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{not json")
    with pytest.raises(KolmValueError, match="cannot be read as JSON"):
        folder(tmp_path / "bad")
    (tmp_path / "bad" / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(KolmValueError, match="is not a kolm_search.parts/1 manifest"):
        folder(tmp_path / "bad")


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete_part", "foreign_record", "bad_record"])
def test_damaged_part_is_recomputed_never_used(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    f = folder(tmp_path / "job")
    for i in range(3):
        f.write(i, frame(i))
    part, record = f.part_path(1), tmp_path / "job" / "part-00001.json"
    if damage == "flip":
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0xFF
        part.write_bytes(bytes(data))
    elif damage == "truncate":
        part.write_bytes(part.read_bytes()[:20])
    elif damage == "delete_part":
        part.unlink()
    elif damage == "foreign_record":
        other = json.loads(record.read_text())
        record.write_text(json.dumps({**other, "job": "0" * 64}))
    else:
        record.write_text("[1, 2")
    with pytest.raises(KolmValueError, match="part 1 is damaged"):
        folder(tmp_path / "job").read()
    again = folder(tmp_path / "job")
    assert again.done() == [0, 2] and "part 1 is damaged" in caplog.text and "recomputed" in caplog.text
    assert not record.exists()  # never trusted again
    again.write(1, frame(1))
    pd.testing.assert_frame_equal(again.read(), pd.concat([frame(i) for i in range(3)], ignore_index=True))


def test_a_record_that_lies_about_rows_is_refused(tmp_path: Path) -> None:
    f = folder(tmp_path / "job", n_parts=1)
    f.write(0, frame(0))
    record = tmp_path / "job" / "part-00000.json"
    meta = json.loads(record.read_text())
    record.write_text(json.dumps({**meta, "rows": 99}))
    with pytest.raises(KolmValueError, match="its record says 99"):
        f.read_part(0)


@pytest.mark.parametrize("step", range(4))
def test_a_write_killed_at_any_step_leaves_nothing_trusted(tmp_path: Path, step: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of one part: write the file's temporary, rename it, write the record's temporary,
    rename it. A crash (simulated: an exception out of the step) at each leaves the part either
    finished or not done, and the folder usable."""
    f = folder(tmp_path / "job")
    f.write(0, frame(0))
    calls = {"n": 0}
    real_replace = os.replace

    class Killed(BaseException):
        pass

    def replace(src: str, dst: str) -> None:
        calls["n"] += 1
        if (calls["n"] - 1) * 2 == step:  # die before this rename
            raise Killed
        real_replace(src, dst)
        if (calls["n"] - 1) * 2 + 1 == step:  # die right after it
            raise Killed

    monkeypatch.setattr(parts_mod.os, "replace", replace)
    with pytest.raises(Killed):
        f.write(1, frame(1))
    monkeypatch.setattr(parts_mod.os, "replace", real_replace)
    done = folder(tmp_path / "job").done()
    assert done == ([0, 1] if step == 3 else [0])
    assert not [p for p in (tmp_path / "job").iterdir() if ".tmp-" in p.name]  # temporaries removed
    f.write(1, frame(1))
    f.write(2, frame(2))
    pd.testing.assert_frame_equal(f.read(), pd.concat([frame(i) for i in range(3)], ignore_index=True))


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "m.json"
    atomic_write(target, b"old")

    def broken(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(parts_mod.os, "fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_stale_temporaries_of_a_killed_writer_are_ignored(tmp_path: Path) -> None:
    f = folder(tmp_path / "job")
    (tmp_path / "job" / ".part-00001.parquet.tmp-0123456789ab").write_bytes(b"half")
    assert folder(tmp_path / "job").done() == []
    f.write(0, frame(0))
    assert folder(tmp_path / "job").done() == [0]


def test_one_job_per_folder_at_a_time(tmp_path: Path) -> None:
    f = folder(tmp_path / "job")
    with f.lock():
        with pytest.raises(KolmValueError, match="in use by another running job"):
            with folder(tmp_path / "job").lock():
                pass
    with folder(tmp_path / "job").lock():  # released
        pass
