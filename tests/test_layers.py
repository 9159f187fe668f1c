"""The package's import layering, as the README states it, read from the source (AST)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

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


#: The root's own modules: the package (what users call) and the leaves every layer imports.
ROOT_MODULES = {"__init__", "errors", "types", "_params", "_extras", "_bridge", "_logging", "_http", "_progress"}
_LEAVES = {"errors", "types", "_params", "_extras", "_bridge", "_logging", "_http", "_progress"}

#: What each lower layer may import (packages and root modules below ``kolm_search``); the layers
#: above the contract (``retrievers``, ``adapters``, ``recipes``, ``jobs``, ``cli``, ``distributed``)
#: are free but for the rules of their own tests below.
MAY_IMPORT = {
    "errors": set(), "_bridge": set(), "_logging": set(), "_extras": set(), "_progress": set(),
    "types": {"errors"},
    "_params": {"errors"},
    "_http": {"errors", "_params"},
    "_kernels": {"errors"},
    "engine": {"errors", "types", "_params", "_extras", "_kernels"},
    "fusion": {"errors", "types", "_params", "_kernels", "engine"},
    "io": {"errors", "_params", "_extras", "_http", "_logging", "engine"},
    "evaluation": {"errors", "_params", "_extras", "_kernels", "engine", "fusion", "io", "compose"},
    "contract": {*_LEAVES, "engine", "contract"},
    "compose": {*_LEAVES, "_kernels", "engine", "fusion", "io", "contract"},
}



def _layer(module: str) -> str:
    """``kolm_search.contract.ports`` -> ``contract``; ``kolm_search.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _package_imports(path: Path) -> set[str]:
    """The modules of the package ``path`` imports (names imported from a module dropped)."""
    out = set()
    for m in _imports(path):
        rel = Path(*m.split(".")[1:])
        if (ROOT / rel).is_dir() or (ROOT / rel).with_suffix(".py").is_file():
            out.add(m)
    return out


def test_the_root_holds_at_most_ten_modules() -> None:
    """Everything else lives in a package that says which layer it is (README, "Layout")."""
    found = {p.stem for p in ROOT.glob("*.py")}
    assert len(found) <= 10 and found == ROOT_MODULES, sorted(found)


def test_each_lower_layer_imports_only_what_sits_below_it() -> None:
    """``_kernels`` imports nothing of the package but ``errors``; ``errors`` is a leaf; the engine
    never imports the contract; ``evaluation`` and ``io`` never import the contract (nor its
    ``pipeline``); the contract imports no retriever, adapter, recipe, job or command, not even
    inside a function."""
    bad = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        layer = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if layer not in MAY_IMPORT:
            continue
        for m in _package_imports(path):
            ok = _layer(m) in MAY_IMPORT[layer] | {layer}
            if not ok:
                bad.add((rel.as_posix(), m))
    assert not bad, sorted(bad)


def test_the_contract_layer_imports_no_retriever() -> None:
    """The contract dispatches on the Protocols of ``contract.ports`` (``Updatable`` for add/delete
    and the cache key's revision), never on a concrete retriever module, even inside a function."""
    for path in _modules("contract"):
        assert not {m for m in _imports(path) if _is(m, "kolm_search.retrievers")}, path


def test_retrievers_fusion_and_adapters_reach_the_contract_only_through_its_ports() -> None:
    """They implement ports: ``contract.ports`` and its helpers for calling ports,
    ``contract.port_calls`` (and, for the simple expanders, the planner's ``normalize_query``; for
    a retriever a saved client can hold, ``saved_kinds``, where it declares its kind) is all of
    the contract they see."""
    allowed = {"kolm_search.contract.ports", "kolm_search.contract.port_calls", "kolm_search.contract.planners",
               "kolm_search.contract.saved_kinds"}
    for sub in ("retrievers", "fusion", "adapters"):
        for path in _modules(sub):
            seen = {m for m in _package_imports(path) if _is(m, "kolm_search.contract")}
            assert seen <= allowed, (path, seen)
            if sub != "adapters":
                assert "kolm_search.contract.planners" not in seen, path


def test_evaluation_and_io_never_import_the_pipeline() -> None:
    for sub in ("evaluation", "io"):
        for path in _modules(sub):
            assert not {m for m in _imports(path) if _is(m, "kolm_search.contract")}, path


def test_only_distributed_imports_distributed() -> None:
    for path in ROOT.rglob("*.py"):
        if "distributed" in path.relative_to(ROOT).parts:
            continue
        assert not {m for m in _imports(path) if _is(m, "kolm_search.distributed")}, path


def test_the_walker_sees_imports() -> None:
    """The checks above could pass vacuously if the walker found nothing: it must see these."""
    assert "kolm_search.errors" in _imports(ROOT / "_kernels" / "fusion.py")
    assert any(_is(m, "kolm_search.contract.pipeline") for m in _imports(ROOT / "contract" / "client.py"))
    assert "kolm_search.adapters.listwise" in _package_imports(ROOT / "adapters" / "scoring.py")  # in a method
    assert "kolm_search.engine.ids" in _package_imports(ROOT / "engine" / "runs.py")  # from kolm_search.engine import ids
    assert {_layer(m) for m in _package_imports(ROOT / "__init__.py")} >= {"contract", "engine", "recipes"}


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


def _walk(call: Any, start: Any) -> list[str]:
    """The package modules a call's data goes through, in order: the frames (of kolm_search) that
    receive ``start`` or a value returned by such a frame (lists and tuples looked into), each
    module once per consecutive stay."""
    held, ids, modules = [start], {id(start)}, []

    def parts(v: Any) -> list[Any]:
        return [v, *v] if isinstance(v, (list, tuple)) else [v]

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("kolm_search"):
            return None
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
        if not any(id(x) in ids for name in code.co_varnames[:n] for x in parts(frame.f_locals.get(name))):
            return None
        if not modules or modules[-1] != module:
            modules.append(module)

        def on_return(f: Any, ev: str, value: Any) -> Any:
            if ev == "return" and value is not None:
                held.extend(parts(value))
                ids.update(id(x) for x in parts(value))
            return on_return
        return on_return

    sys.settrace(on_call)
    try:
        call()
    finally:
        sys.settrace(None)
    return modules


def test_the_queries_walk_crosses_at_most_four_modules_without_returning() -> None:
    """Following ``SearchClient.search_batch``'s ``queries`` through the calls (issue 26: seven
    modules and five returns before it): at most four modules, none entered twice."""
    from kolm_search import presets

    client = presets.bm25([{"id": "a", "content": "red fox"}, {"id": "b", "content": "blue sky"}])
    queries = ["red fox", "sky"]
    walk = _walk(lambda: client.search_batch(queries, limit=2), queries)
    assert walk[:2] == ["kolm_search.contract.client", "kolm_search.contract.guards"], walk  # the walker sees it
    assert len(walk) <= 4 and len(set(walk)) == len(walk), walk
    assert _walk(lambda: [q.upper() for q in queries], queries) == []  # nothing of the package: nothing seen
