"""The shape of lambo_core, read from its source: no import cycle, no oversized module, no
module-level registry of mutable state (issue #14).

Everything here is built with ``ast`` from the files on disk, never by importing them, so an
import hidden in a function or under ``TYPE_CHECKING`` counts like any other.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lambo_core"
MAX_LINES = 600

# ---------------------------------------------------------------------------------------------
# modules and their imports


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module under ``package_dir`` by dotted name (a package by its ``__init__``)."""
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _base_package(module: str, path: Path) -> str:
    """The package a relative import in ``module`` starts from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve_from(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module named by ``from <node.module> import ...`` inside ``module``."""
    if node.level == 0:
        return node.module or ""
    base = _base_package(module, path).split(".")
    keep = len(base) - (node.level - 1)
    if keep <= 0:
        return ""  # above the top package: not ours
    stem = ".".join(base[:keep])
    return f"{stem}.{node.module}" if node.module else stem


def _longest_known(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the file, wherever it sits.

    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
    The parent packages Python imports on the way to a submodule are not edges: loading
    ``a.b.c`` runs ``a/__init__`` first, but ``a.b.c`` does not depend on what it holds.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _longest_known(alias.name, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, path, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:
                    yield submodule, node.lineno
                elif source in modules:
                    yield source, node.lineno


@dataclass(frozen=True)
class ImportGraph:
    """Module -> the modules it imports, each with the first line that imports it."""

    edges: dict[str, dict[str, int]]
    paths: dict[str, Path]

    @classmethod
    def of_package(cls, package_dir: Path) -> ImportGraph:
        modules = module_names(package_dir)
        edges: dict[str, dict[str, int]] = {name: {} for name in modules}
        for name, path in modules.items():
            for target, line in imports_of(name, path, modules):
                if target != name:
                    edges[name].setdefault(target, line)
        return cls(edges, modules)


def strongly_connected(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted, iteratively (no recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    found.extend(_pop_component(node, stack, on_stack))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, {})))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def _pop_component(node: str, stack: list[str], on_stack: set[str]) -> list[list[str]]:
    component: list[str] = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
            break
    return [sorted(component)] if len(component) > 1 else []


def one_cycle(component: list[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first, inside it)."""
    start = component[0]
    members = set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(edges[node]):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child in members and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def describe_cycles(graph: ImportGraph) -> list[str]:
    """One paragraph per cycle: its modules, then one loop through them with each import's line."""
    lines: list[str] = []
    for component in strongly_connected(graph.edges):
        loop = one_cycle(component, graph.edges)
        steps = [
            f"    {a} -> {b}  ({graph.paths[a].name}:{graph.edges[a][b]})"
            for a, b in itertools.pairwise(loop)
        ]
        lines.append("cycle among " + ", ".join(component) + "\n" + "\n".join(steps))
    return lines


# ---------------------------------------------------------------------------------------------
# module-level mutable state

_CONTAINER_CALLS = frozenset(
    {
        "dict",
        "list",
        "set",
        "bytearray",
        "defaultdict",
        "Counter",
        "OrderedDict",
        "ChainMap",
        "deque",
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "WeakSet",
        "PerOwner",
    }
)
_MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "remove",
        "pop",
        "popitem",
        "popleft",
        "appendleft",
        "extendleft",
        "rotate",
        "clear",
        "update",
        "setdefault",
        "add",
        "discard",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
        "sort",
        "reverse",
        "move_to_end",
        "__setitem__",
        "__delitem__",
        "__iadd__",
        "__ior__",
    }
)
_LITERALS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def _is_container(value: ast.expr) -> bool:
    if isinstance(value, _LITERALS):
        return True
    if not isinstance(value, ast.Call):
        return False
    func = value.func.value if isinstance(value.func, ast.Subscript) else value.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name in _CONTAINER_CALLS


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at import time: the module body and the blocks of its if/try/with."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.With):
            yield from _module_statements(stmt.body)
            yield from _module_statements(getattr(stmt, "orelse", []))
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from _module_statements(block)
            for handler in stmt.handlers:
                yield from _module_statements(handler.body)


def _bound_pairs(stmt: ast.stmt) -> Iterator[tuple[ast.expr, ast.expr]]:
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
                yield from zip(target.elts, stmt.value.elts, strict=False)
            else:
                yield target, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        yield stmt.target, stmt.value


def module_containers(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound to a mutable container, with the line binding each."""
    found: dict[str, int] = {}
    for stmt in _module_statements(tree.body):
        for target, value in _bound_pairs(stmt):
            if isinstance(target, ast.Name) and _is_container(value):
                found.setdefault(target.id, stmt.lineno)
    return found


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutated_names(node: ast.AST) -> Iterator[tuple[str, int]]:
    """Names this one node mutates in place: ``x[k] = v``, ``del x[k]``, ``x += y``, ``x.add()``."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign | ast.Delete):
        targets = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    for target in targets:
        if isinstance(target, ast.Subscript) or isinstance(node, ast.AugAssign):
            name = _root_name(target)
            if name is not None:
                yield name, target.lineno
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _MUTATORS
    ):
        name = _root_name(node.func.value)
        if name is not None:
            yield name, node.lineno


_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _local_names(scope: _Scope) -> set[str]:
    """Names a function binds for itself (so a module name of the same spelling is shadowed)."""
    args = scope.args
    local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    local.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    declared_global: set[str] = set()
    for node in _walk_own(scope):
        if isinstance(node, ast.Global | ast.Nonlocal):
            declared_global.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            local.add(node.id)
    return local - declared_global


def _walk_own(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of one scope, not descending into the functions nested in it."""
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, _Scope):
            pending.extend(ast.iter_child_nodes(node))


def _mutations(scope: ast.AST, shadowed: frozenset[str]) -> Iterator[tuple[str, int]]:
    for node in _walk_own(scope):
        if isinstance(node, _Scope):
            yield from _mutations(node, shadowed | _local_names(node))
            continue
        for name, line in _mutated_names(node):
            if name not in shadowed:
                yield name, line


def _per_owner_uses(tree: ast.Module) -> Iterator[int]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt | ast.expr):
            continue
        named = (
            (isinstance(node, ast.Name) and node.id == "PerOwner")
            or (isinstance(node, ast.Attribute) and node.attr == "PerOwner")
            or (isinstance(node, ast.ClassDef) and node.name == "PerOwner")
            or (
                isinstance(node, ast.ImportFrom | ast.Import)
                and any(a.name == "PerOwner" for a in node.names)
            )
        )
        if named:
            yield node.lineno


def mutable_registries(source: str) -> list[str]:
    """Module-level containers the module mutates, and every use of ``PerOwner``."""
    tree = ast.parse(source)
    containers = module_containers(tree)
    problems: dict[str, str] = {}
    for name, line in _mutations(tree, frozenset()):
        if name in containers and name not in problems:
            problems[name] = (
                f"{name} (bound to a container on line {containers[name]}, mutated on line {line})"
            )
    found = sorted(problems.values())
    lines = sorted(set(_per_owner_uses(tree)))
    if lines:
        found.append("PerOwner used on line(s) " + ", ".join(map(str, lines)))
    return found


# ---------------------------------------------------------------------------------------------
# the checks against lambo_core


def _lambo_modules() -> dict[str, Path]:
    return module_names(ROOT / PACKAGE)


def test_lambo_core_has_no_import_cycle() -> None:
    cycles = describe_cycles(ImportGraph.of_package(ROOT / PACKAGE))
    assert not cycles, "import cycles in lambo_core:\n" + "\n".join(cycles)


def test_no_module_is_over_the_line_limit() -> None:
    over = {
        str(path.relative_to(ROOT)): count
        for path in _lambo_modules().values()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    listing = "\n".join(f"    {path}: {n} lines" for path, n in sorted(over.items()))
    assert not over, f"modules over {MAX_LINES} lines:\n{listing}"


def test_no_module_level_registry_of_mutable_state() -> None:
    found = {
        str(path.relative_to(ROOT)): problems
        for path in _lambo_modules().values()
        if (problems := mutable_registries(path.read_text(encoding="utf-8")))
    }
    listing = "\n".join(f"    {path}: {'; '.join(p)}" for path, p in sorted(found.items()))
    assert not found, f"module-level mutable state:\n{listing}"


# ---------------------------------------------------------------------------------------------
# the checkers themselves, on small fakes


def _fake_package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def _edges(root: Path, files: dict[str, str]) -> dict[str, dict[str, int]]:
    return ImportGraph.of_package(_fake_package(root, files)).edges


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    graph = ImportGraph.of_package(
        _fake_package(
            tmp_path,
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from .b import thing\n",
                "pkg/b.py": "def later():\n    from pkg import c\n",
                "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from .a import other\n",
                "pkg/d.py": "import pkg.a\n",
            },
        )
    )
    assert strongly_connected(graph.edges) == [["pkg.a", "pkg.b", "pkg.c"]]
    (described,) = describe_cycles(graph)
    assert described.splitlines() == [
        "cycle among pkg.a, pkg.b, pkg.c",
        "    pkg.a -> pkg.b  (a.py:1)",
        "    pkg.b -> pkg.c  (b.py:2)",
        "    pkg.c -> pkg.a  (c.py:3)",
    ]


def test_relative_imports_resolve_from_the_right_package(tmp_path: Path) -> None:
    edges = _edges(
        tmp_path,
        {
            "pkg/__init__.py": "from .sub import api\n",
            "pkg/top.py": "",
            "pkg/sub/__init__.py": "from . import api\nfrom .. import top\n",
            "pkg/sub/api.py": "from ..top import name\nfrom . import helper_name\n",
            "pkg/sub/deep/__init__.py": "",
            "pkg/sub/deep/leaf.py": "from ... import top\nfrom ...sub import api\nimport os\n",
        },
    )
    assert edges == {
        "pkg": {"pkg.sub.api": 1},
        "pkg.top": {},
        "pkg.sub": {"pkg.sub.api": 1, "pkg.top": 2},
        # ``from . import helper_name`` (not a module) is the package itself
        "pkg.sub.api": {"pkg.top": 1, "pkg.sub": 2},
        "pkg.sub.deep": {},
        "pkg.sub.deep.leaf": {"pkg.top": 1, "pkg.sub.api": 2},
    }


def test_importing_a_submodule_is_no_edge_to_its_parent_package(tmp_path: Path) -> None:
    # pkg/__init__ imports a; a imports pkg.sub.b; that does not make a depend on pkg
    files = {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "import pkg.sub.b\nfrom pkg.sub import c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "",
        "pkg/sub/c.py": "",
    }
    edges = _edges(tmp_path, files)
    assert edges["pkg.a"] == {"pkg.sub.b": 1, "pkg.sub.c": 2}
    assert strongly_connected(edges) == []


def test_a_name_from_the_package_init_is_an_edge_to_it(tmp_path: Path) -> None:
    edges = _edges(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import run\nVERSION = '1'\n",
            "pkg/a.py": "from . import VERSION\n",
        },
    )
    assert strongly_connected(edges) == [["pkg", "pkg.a"]]


def test_separate_cycles_are_named_separately(tmp_path: Path) -> None:
    edges = _edges(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "from . import a\n",
            "pkg/c.py": "from . import d\nfrom . import a\n",
            "pkg/d.py": "from . import c\n",
        },
    )
    assert strongly_connected(edges) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


REGISTRY_CASES = [
    pytest.param("_SEEN = {}\ndef note(k):\n    _SEEN[k] = 1\n", ["_SEEN"], id="subscript-store"),
    pytest.param("_SEEN = {}\ndef drop(k):\n    del _SEEN[k]\n", ["_SEEN"], id="subscript-del"),
    pytest.param("_Q: list[int] = []\ndef push(x):\n    _Q.append(x)\n", ["_Q"], id="append"),
    pytest.param(
        "import weakref\n_W = weakref.WeakKeyDictionary()\n_W.clear()\n", ["_W"], id="weak"
    ),
    pytest.param(
        "from collections import defaultdict\n_D = defaultdict(list)\n"
        "def f(k):\n    _D[k].append(1)\n",
        ["_D"],
        id="nested-subscript",
    ),
    pytest.param(
        "_S = set()\nclass C:\n    def m(self):\n        _S.add(1)\n", ["_S"], id="method"
    ),
    pytest.param("_L = [x for x in range(3)]\n_L += [4]\n", ["_L"], id="augmented"),
    pytest.param("_A, _B = {}, []\ndef f():\n    _B.pop()\n", ["_B"], id="tuple-binding"),
    pytest.param("_C = {}\ndef f():\n    _C.__setitem__(1, 2)\n", ["_C"], id="dunder"),
    pytest.param(
        "try:\n    _T = {}\nexcept ImportError:\n    pass\ndef f():\n    _T.update(a=1)\n",
        ["_T"],
        id="inside-try",
    ),
]


@pytest.mark.parametrize(("source", "names"), REGISTRY_CASES)
def test_a_mutated_module_container_is_reported(source: str, names: list[str]) -> None:
    found = mutable_registries(source)
    assert [entry.split(" ")[0] for entry in found] == names


QUIET_CASES = [
    pytest.param("TABLE = {'a': 1}\ndef get(k):\n    return TABLE[k]\n", id="read-only-table"),
    pytest.param("NAMES = ['a']\ndef f():\n    return sorted(NAMES)\n", id="read-only-list"),
    pytest.param(
        "_CACHE = {}\ndef f(_CACHE):\n    _CACHE[1] = 2\n", id="parameter-shadows-module-name"
    ),
    pytest.param("ITEMS = []\ndef f():\n    ITEMS = []\n    ITEMS.append(1)\n", id="local-shadow"),
    pytest.param(
        "class Box:\n    def __init__(self):\n        self.items = {}\n        self.items[1] = 2\n",
        id="instance-state",
    ),
    pytest.param("_T = (1, 2)\nFROZEN = frozenset({1})\n", id="immutable"),
    pytest.param("def f():\n    seen = {}\n    seen[1] = 2\n", id="function-local"),
]


@pytest.mark.parametrize("source", QUIET_CASES)
def test_constant_tables_and_local_state_pass(source: str) -> None:
    assert mutable_registries(source) == []


def test_a_global_declaration_makes_the_module_name_count_again() -> None:
    source = "_X = []\ndef f():\n    global _X\n    _X = [1]\n    _X.append(2)\n"
    assert [p.split(" ")[0] for p in mutable_registries(source)] == ["_X"]


def test_any_use_of_per_owner_is_reported() -> None:
    source = "from .owned import PerOwner\n_S: PerOwner[object, int] = PerOwner()\n"
    assert mutable_registries(source) == ["PerOwner used on line(s) 1, 2"]
    assert mutable_registries("import owned\nx = owned.PerOwner\n") == [
        "PerOwner used on line(s) 2"
    ]


def test_the_line_limit_counts_lines(tmp_path: Path) -> None:
    package = _fake_package(tmp_path, {"pkg/__init__.py": "", "pkg/big.py": "x = 1\n" * 601})
    counts = {
        name: len(path.read_text().splitlines()) for name, path in module_names(package).items()
    }
    assert counts == {"pkg": 0, "pkg.big": 601}
