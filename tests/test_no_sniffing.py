"""No module reaches into another object's state or tells classes apart by their names (AST).

Capabilities are declared (the Protocols of ``kolm_search.contract.ports``), so no module needs to
assign into another object's ``__dict__`` (or ``vars(obj)``) or compare a class's
``__name__`` / ``__qualname__`` / ``__module__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kolm_search

ROOT = Path(kolm_search.__file__).parent
_NAMES = {"__name__", "__qualname__", "__module__"}
_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}

def _others_dict(node: ast.AST) -> bool:
    """``x.__dict__`` or ``vars(x)`` for an ``x`` that is not ``self``/``cls``."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and node.args:
        arg = node.args[0]
        return not (isinstance(arg, ast.Name) and arg.id in ("self", "cls"))
    return False


def _class_name(node: ast.AST) -> bool:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return any(isinstance(n, ast.Attribute) and n.attr in _NAMES for n in items)


def violations(source: str) -> list[str]:
    """Each offending expression of ``source``, unparsed."""
    found = []
    for node in ast.walk(ast.parse(source)):
        bad = False
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            bad = any(isinstance(t, ast.Subscript) and _others_dict(t.value) for t in targets)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            bad = (node.func.attr in _MUTATORS and _others_dict(node.func.value)) or (
                node.func.attr in ("startswith", "endswith") and _class_name(node.func.value))
        elif isinstance(node, ast.Compare):
            bad = any(_class_name(n) for n in (node.left, *node.comparators))
        if bad:
            found.append(ast.unparse(node))
    return found


def test_the_scan_sees_what_it_forbids() -> None:
    forbidden = ["obj.__dict__['table'] = t", "other.__dict__.update(state)", "vars(obj)['x'] = 1",
                 "del obj.__dict__['x']", "ok = type(p).__qualname__ == 'InMemoryCache'",
                 "ok = (type(p).__module__, type(p).__name__) in KNOWN", "ok = fn.__name__ != 'rerank_batch'",
                 "ok = type(obj).__module__.startswith('ranx')"]
    for line in forbidden:
        assert violations(line), line
    allowed = ["self.__dict__.update(state)", "x = obj.__dict__.get('table')", "name = type(obj).__name__",
               "if __name__ == '__main__': pass", "ok = isinstance(port, NonBlockingCache)"]
    for line in allowed:
        assert not violations(line), line


def test_no_module_edits_anothers_dict_or_compares_class_names() -> None:
    found = {path.relative_to(ROOT).as_posix(): violations(path.read_text(encoding="utf-8"))
             for path in sorted(ROOT.rglob("*.py"))}
    assert not {name: v for name, v in found.items() if v}


#: ``(file, attribute)`` read by name on purpose: a retriever's display name in log lines; the
#: worker processes of a ``ProcessPoolExecutor``, which has no public handle on them before
#: Python 3.14's ``terminate_workers`` (to end a hung tokenising worker).
_NAMED = {("retrievers/composite_gather.py", "name"), ("retrievers/_parallel.py", "_processes")}


def _named_reads(source: str) -> list[str]:
    """The attribute names that ``getattr(x, "name")`` / ``hasattr(x, "name")`` read (dunders aside)."""
    return [node.args[1].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and not node.args[1].value.startswith("__")]


def test_the_contract_and_the_retrievers_find_no_capability_by_name() -> None:
    """Capabilities are Protocols (``ports.implements``): no ``getattr(x, "table")``, no class
    attribute tags such as ``updates = "bm25"`` looked up by name."""
    assert _named_reads('ok = getattr(r, "retrieve_batch", None)\nok = getattr(f, "__name__", "")') == ["retrieve_batch"]
    files = [ROOT / "contract" / f"{m}.py" for m in ("client", "pipeline", "stages", "batch", "guards", "config", "ports")]
    for path in [*files, *sorted((ROOT / "retrievers").glob("*.py"))]:
        name = path.relative_to(ROOT).as_posix()
        assert {(name, a) for a in _named_reads(path.read_text(encoding="utf-8"))} <= _NAMED, name
