"""Datasets and files: BEIR folders and downloads, TREC runs and qrels, parquet."""

from pathlib import Path

from kolm_search.io.beir import Dataset, load_beir
from kolm_search.io.download import beir_registry, default_cache_dir, download_beir
from kolm_search.io.trec import read_qrels, read_run, write_qrels, write_run

__all__ = [
    "Dataset",
    "beir_registry",
    "default_cache_dir",
    "download_beir",
    "load_beir",
    "load_dataset",
    "read_qrels",
    "read_run",
    "write_qrels",
    "write_run",
]


def load_dataset(name_or_path: str | Path, split: str = "test", *, cache_dir: str | Path | None = None) -> Dataset:
    """A BEIR folder by path, or a registered BEIR name (downloaded on first use)."""
    path = Path(name_or_path)
    if path.exists():
        return load_beir(path, split)
    name = str(name_or_path)
    if name in beir_registry():
        return load_beir(download_beir(name, cache_dir), split)
    from kolm_search.errors import KolmValueError

    raise KolmValueError(f"{name!r} is neither a BEIR folder nor a known BEIR dataset ({sorted(beir_registry())})")
