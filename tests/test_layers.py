"""The package's import layering, as the README states it, read from the source (AST)."""

from __future__ import annotations

import ast
from pathlib import Path

import kolm_search

ROOT = Path(kolm_search.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every ``kolm_search...`` module a file imports (absolute or relative, any depth)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(("kolm_search", *path.relative_to(ROOT).parent.parts))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kolm_search")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("kolm_search"):
                found.add(mod)
                found |= {f"{mod}.{a.name}" for a in node.names}
    return found


def _modules(sub: str) -> list[Path]:
    return sorted((ROOT / sub).rglob("*.py")) if (ROOT / sub).is_dir() else [ROOT / f"{sub}.py"]


def _is(mod: str, name: str) -> bool:
    return mod == name or mod.startswith(name + ".")


def test_kernels_import_only_kernels_and_errors() -> None:
    for path in _modules("_kernels"):
        bad = {m for m in _imports(path)
               if not (_is(m, "kolm_search._kernels") or _is(m, "kolm_search.errors"))}
        assert not bad, (path.name, bad)


def test_errors_is_a_leaf() -> None:
    assert _imports(ROOT / "errors.py") == set()


def test_evaluation_and_io_never_import_the_pipeline() -> None:
    for sub in ("evaluation", "io"):
        for path in _modules(sub):
            assert not {m for m in _imports(path) if _is(m, "kolm_search.pipeline")}, path


def test_only_distributed_imports_distributed() -> None:
    for path in ROOT.rglob("*.py"):
        if "distributed" in path.relative_to(ROOT).parts:
            continue
        assert not {m for m in _imports(path) if _is(m, "kolm_search.distributed")}, path


def test_the_walker_sees_imports() -> None:
    """The checks above could pass vacuously if the walker found nothing: it must see these."""
    assert "kolm_search.errors" in _imports(ROOT / "_kernels" / "fusion.py")
    assert any(_is(m, "kolm_search.pipeline") for m in _imports(ROOT / "client.py"))


def test_the_contract_layer_imports_no_retriever() -> None:
    """The contract dispatches on the Protocols of ``ports`` (``Updatable`` for add/delete and the
    cache key's revision), never on a concrete retriever module."""
    for name in ("client", "pipeline", "stages", "ports", "batch", "guards", "config", "planners", "types"):
        assert not {m for m in _imports(ROOT / f"{name}.py") if _is(m, "kolm_search.retrievers")}, name


def test_no_import_circle() -> None:
    """No module reaches itself through the imports of others (a package's ``__init__``, which
    only hands names on, aside)."""
    files = {".".join(("kolm_search", *p.relative_to(ROOT).with_suffix("").parts)): p
             for p in ROOT.rglob("*.py") if p.name != "__init__.py"}
    graph = {m: {i for i in _imports(p) if i in files and i != m} for m, p in files.items()}
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            assert state.get(nxt) != 1, " -> ".join([*path[path.index(nxt):], module, nxt])
            if nxt not in state:
                walk(nxt, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [])
