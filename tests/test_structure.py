"""The package's shape: no import cycle between its modules, and none over 500 lines; and the
benchmarks' (tools/ on streamlens.bench.harness without `sys.path` edits or test fixtures, at most
100 files in tools/results).

A cycle counts every import statement, the type-only ones under `if TYPE_CHECKING:` and those inside
functions included: each still ties the two modules together (a reader of one needs the other, and a lazy
import only moves the cycle to run time), so none may close a loop."""

from __future__ import annotations

import ast
from collections import deque
from importlib.util import resolve_name
from itertools import pairwise
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "streamlens"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of `package` by dotted name; a package's `__init__.py` is the package itself."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def owner(name: str, known: dict[str, Path]) -> str | None:
    """The module `name` lives in: itself, or the nearest enclosing module (`pkg.mod.Class` -> `pkg.mod`)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, known: dict[str, Path]) -> list[tuple[str, int]]:
    """The package modules that module `name` imports, each with the line of its statement.

    `from pkg import x` is `pkg.x` when that is a module, else `pkg`; relative imports resolve against the
    module's package (itself for an `__init__`)."""
    path = known[name]
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve_name("." * node.level + (node.module or ""), here) if node.level else node.module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            module = owner(target, known)
            if module is not None:
                found.append((module, node.lineno))
    return found


def graph(known: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line importing it}, among the package's modules.

    A module's own enclosing packages are left out: Python runs them before the module whichever way the
    import goes, so an edge to them closes no loop of ours."""
    edges: dict[str, dict[str, int]] = {}
    for name in known:
        mine = edges.setdefault(name, {})
        for target, line in sorted(imports(name, known), key=lambda hit: hit[1]):
            if target != name and not name.startswith(target + "."):
                mine.setdefault(target, line)
    return edges


def components(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root, out in edges.items():
        if root in index:
            continue
        work = [(root, iter(out))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, rest = work[-1]
            child = next(rest, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def shortest_cycle(start: str, edges: dict[str, dict[str, int]]) -> list[str]:
    """The shortest loop from `start` back to itself: what a failure names, one edge per line."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in edges[node]:
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    return []


def describe(cycle: list[str], edges: dict[str, dict[str, int]], known: dict[str, Path]) -> str:
    """One line per edge of `cycle`: the two modules and where the first imports the second."""
    return "\n".join(f"  {a} -> {b}  ({known[a]}:{edges[a][b]})" for a, b in pairwise(cycle))


def test_imports_count_type_only_and_function_local_ones_and_resolve_relative_ones(tmp_path):
    """The reading itself, on a small package whose every loop is known."""
    package = tmp_path / "pkg"
    files = {
        "__init__.py": "from .a import A\n",
        "a.py": ("from typing import TYPE_CHECKING\n"
                 "if TYPE_CHECKING:\n"
                 "    from .b import B\n"
                 "class A:\n"
                 "    def f(self):\n"
                 "        from pkg.sub import thing\n"
                 "        import pkg.sub.deep\n"),
        "b.py": "import os\nfrom . import a\nfrom pkg import A\nclass B: ...\n",
        "sub/__init__.py": "from .. import b\nthing = 1\n",
        "sub/deep.py": "from ..a import A\n",
        "c.py": "from .sub.deep import A\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    known = modules(package)
    assert sorted(known) == ["pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.deep"]
    assert sorted(imports("pkg.a", known)) == [("pkg.b", 3), ("pkg.sub", 6), ("pkg.sub.deep", 7)]
    assert sorted(imports("pkg.b", known)) == [("pkg", 3), ("pkg.a", 2)]  # `os` is not ours
    assert imports("pkg.sub", known) == [("pkg.b", 1)]  # relative to the package an __init__ is
    assert imports("pkg.c", known) == [("pkg.sub.deep", 1)]
    edges = graph(known)
    assert edges["pkg.b"] == {"pkg.a": 2}  # its own package left out
    assert components(edges) == [["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.deep"]]
    assert shortest_cycle("pkg.b", edges) == ["pkg.b", "pkg.a", "pkg.b"]


def test_no_import_cycle():
    """streamlens has none; a failure names each loop's modules and one shortest path around it."""
    known = modules()
    edges = graph(known)
    loops = components(edges)
    assert not loops, "import cycle(s) among the package's modules:\n" + "\n\n".join(
        f"{len(loop)} modules: {', '.join(loop)}; one way round:\n"
        + describe(shortest_cycle(loop[0], edges), edges, known) for loop in loops)


#: the most lines a module may have: past it, it holds more than one job (split it along its seams)
MAX_LINES = 500


def test_no_module_is_over_500_lines():
    """Every module is at most MAX_LINES lines."""
    root = PACKAGE.parent
    long = {str(path.relative_to(root)): n for path in modules().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


# -- the benchmarks' house: tools/ on one harness, tools/results pruned ----------------------------

TOOLS = PACKAGE.parent / "tools"
#: the most files tools/results may hold: the pages docs and code cite and their current runs' JSON
MAX_RESULTS = 100
#: what changes `sys.path` (a tool imports the installed package instead: `python tools/x.py`)
PATH_EDITS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__iadd__"}


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def sys_path_edits(tree: ast.AST) -> list[int]:
    """The lines of a module that change `sys.path`: a call of one of its mutating methods, an
    assignment to it or to an item of it, `+=`."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PATH_EDITS
                and _is_sys_path(node.func.value)):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value)) for t in targets):
                lines.append(node.lineno)
    return sorted(lines)


def tool_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """(module, line) of every import, with `from m import name` as `m.name`, and every attribute read
    of a name bound to a streamlens module there (`appearance.soft_bins` after `from streamlens.reid
    import appearance`), as `module.attribute`."""
    found, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
            modules.update({alias.asname: alias.name for alias in node.names if alias.asname})
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
            if node.module.split(".")[0] == "streamlens":
                modules.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append((f"{modules[node.value.id]}.{node.attr}", node.lineno))
    return found


def tools() -> dict[str, ast.AST]:
    """Every script of tools/ (experiments included) by its path, parsed."""
    return {str(path.relative_to(TOOLS.parent)): ast.parse(path.read_text(), str(path))
            for path in sorted(TOOLS.rglob("*.py"))}


def test_every_package_says_what_it_is_in_its_front_door():
    """Each package of streamlens/ (graph/'s rooms included) has a docstring in its `__init__.py`."""
    bare = [str(init.relative_to(PACKAGE.parent)) for init in sorted(PACKAGE.rglob("__init__.py"))
            if not ast.get_docstring(ast.parse(init.read_text()))]
    assert not bare, f"packages without a docstring: {bare}"


def probes(path: Path) -> list[int]:
    """The lines of `path` that call getattr() or hasattr()."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")]


def test_probes_and_tests_the_graph_makes_of_its_own_interfaces_are_few():
    """The runtime declares what its parts can do (on Stage, Source, Sink, Detector, Tracker, the
    schedulers) instead of probing them: at most 3 getattr/hasattr in graph/ and its rooms."""
    found = {f"{path.relative_to(PACKAGE)}:{line}" for path in (PACKAGE / "graph").rglob("*.py") for line in probes(path)}
    assert len(found) <= 3, sorted(found)


def test_probes_count_calls_and_nothing_else(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("x = getattr(a, 'b', None)\n# getattr(c)\ny = 'hasattr(d)'\nz = hasattr(e, 'f')\n")
    assert probes(path) == [1, 4]


def test_the_readings_of_tools():
    """The checks below, on a tool that does everything they forbid."""
    tree = ast.parse("import sys\nsys.path.insert(0, 'x')\nsys.path += ['y']\nsys.path[0] = 'z'\n"
                     "from tests.rtsp_server import free_port\nfrom streamlens.sources.clips import _Packet\n"
                     "print(sys.path[0])\n")
    assert sys_path_edits(tree) == [2, 3, 4]
    assert ("tests.rtsp_server.free_port", 5) in tool_imports(tree)
    assert ("streamlens.sources.clips._Packet", 6) in tool_imports(tree)


def test_no_tool_edits_sys_path():
    """tools/ are run as `python tools/x.py` with streamlens installed: what they need is imported."""
    edits = {name: lines for name, tree in tools().items() if (lines := sys_path_edits(tree))}
    assert edits == {}, f"sys.path edited in tools/ (file: lines): {edits}"


def test_no_tool_imports_a_test_fixture_or_a_private_name():
    """Test servers and models come from streamlens.testing; a tool uses public names only."""
    wrong = {name: [f"{module} (line {line})" for module, line in tool_imports(tree)
                    if module.split(".")[0] == "tests"
                    or any(part.startswith("_") and not part.startswith("__") for part in module.split("."))]
             for name, tree in tools().items()}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_every_benchmark_names_the_machine_through_the_harness():
    """Every benchmark imports streamlens.bench.harness (the machine, its CPU flags, the page), and none
    reads the CPU's name by itself."""
    benchmarks = {name: tree for name, tree in tools().items()
                  if Path(name).stem.startswith("bench_") or Path(name).stem in ("soak", "profile_engine")}
    assert len(benchmarks) > 20
    off = [name for name, tree in benchmarks.items()
           if not any(module.startswith("streamlens.bench.harness") for module, _ in tool_imports(tree))]
    by_hand = [name for name in tools() if "cpuinfo" in (TOOLS.parent / name).read_text()]
    assert off == [] and by_hand == [], f"not on the harness: {off}; the CPU named by hand: {by_hand}"


def test_the_engine_never_imports_the_test_support():
    """streamlens.testing (servers and models for tests and benchmarks) is imported by tests and tools only."""
    known = modules()
    edges = graph(known)
    users = sorted(name for name, out in edges.items() if not name.startswith("streamlens.testing")
                   and any(target.startswith("streamlens.testing") for target in out))
    assert users == [], f"engine modules importing streamlens.testing: {users}"


def test_tools_results_holds_at_most_100_files():
    """The pages that docs and code cite and their current runs' JSON; superseded runs' raw JSON goes
    (git keeps it)."""
    files = [p for p in (TOOLS / "results").rglob("*") if p.is_file()]
    assert len(files) <= MAX_RESULTS, f"tools/results holds {len(files)} files (at most {MAX_RESULTS})"
