"""The package's shape, read from its own imports (ast; the tab's JavaScript by its import lines):
no import circles, no import that runs up a layer, at most 20 modules at any folder level, and
every subpackage saying its role in one line. tests/ and benchmarks/ are not package code: they
may import from any layer, and are not counted."""
from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("profilers", "analysis", "workloads", "gapscope")
# Bottom to top: a module imports from its own layer or the ones below, never from above. The
# most specific prefix names a module's layer ("analysis" alone: analysis/report.py, the top).
LAYERS = ("profilers", "analysis.events", "analysis.readers", "analysis.model", "analysis.measures",
          "analysis.results", "analysis.renderers", "analysis.tensorboard", "analysis", "workloads",
          "gapscope", "cli")
MAX_MODULES = 20
# Installed as gapscope.analysis, ... (linked into gapscope/ in the repository): always imported so.
LINKED = ("analysis", "profilers", "workloads", "cli")


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package code by dotted name. A package's __init__ that holds only its
    docstring is no module of its own: importing it takes nothing from its layer."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.is_symlink():  # gapscope/cli.py: the top-level cli.py under its package name
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                if _docstring_only(path):
                    continue
                parts.pop()
            found[".".join(parts)] = path
    if (root / "cli.py").is_file():
        found["cli"] = root / "cli.py"
    return found


def _docstring_only(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def imports(root: Path) -> dict[str, set[str]]:
    """Each module's imports of other package modules, lazy ones (inside functions) included:
    `from a.b import c` counts as a.b.c where that is a module, else as a.b."""
    found = modules(root)
    graph = {}
    for name, path in found.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                candidates = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for candidate in map(_unlinked, candidates):
                while candidate and candidate not in found:
                    candidate = candidate.rpartition(".")[0]
                if candidate and candidate != name:
                    targets.add(candidate)
        graph[name] = targets
    return graph


def _unlinked(name: str) -> str:
    """gapscope.analysis.x -> analysis.x: a linked package's modules go by their folder's name."""
    head, _, rest = name.partition(".")
    return rest if head == "gapscope" and rest.split(".")[0] in LINKED else name


def top_level_imports(root: Path) -> list[str]:
    """Imports of a linked package by its bare name (`from analysis...`): in an installed gapscope
    that name is the user's own package, or nothing."""
    found = []
    for path in sorted(p for p in root.rglob("*.py") if ".venv" not in p.parts
                       and not p.is_symlink() and "fixtures" not in p.parts):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     and node.module else [])
            found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] in LINKED]
    return found


def layer(module: str) -> int:
    ranks = [i for i, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    assert ranks, f"{module}: in no layer (add its package to LAYERS)"
    return max(ranks, key=lambda i: len(LAYERS[i]))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# ES module imports: `import {a} from './b.js';`, `import './c.js';`, `export {x} from './d.js';`,
# and dynamic `import('./e.js')`.
_JS_IMPORT = re.compile(r"""(?:\bimport\s*(?:[\w*{}\s,$]+\s*from\s*)?|\bexport\s*[\w*{}\s,$]+\s*from\s*|\bimport\s*\(\s*)['"]([^'"]+)['"]""")


def js_imports(root: Path) -> dict[str, set[str]]:
    """Each JavaScript module of the package code and the package's JavaScript modules it
    imports (relative specifiers, resolved against its folder), as paths from `root`."""
    found = {path.resolve(): str(path.relative_to(root)) for package in PACKAGES
             for path in sorted((root / package).rglob("*.js"))}
    graph = {}
    for path, name in found.items():
        targets = set()
        for spec in _JS_IMPORT.findall(path.read_text()):
            if spec.startswith("."):
                target = (path.parent / spec).resolve()
                if target in found and target != path:
                    targets.add(found[target])
        graph[name] = targets
    return graph


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if layer(b) > layer(a))


def crowded(root: Path) -> dict[str, int]:
    """Folder levels of the package code holding more than MAX_MODULES modules."""
    counts = Counter(str(path.parent.relative_to(root)) for package in PACKAGES
                     for path in (root / package).rglob("*.py")
                     if path.name != "__init__.py" and not path.is_symlink())
    return {folder: n for folder, n in counts.items() if n > MAX_MODULES}


def test_the_package_has_no_import_circle():
    assert circles(imports(ROOT)) == []


def test_the_tabs_javascript_has_no_import_circle():
    graph = js_imports(ROOT)
    assert len(graph) >= 3 and any(graph.values())  # the tab's scripts, importing each other
    assert circles(graph) == []


def test_no_module_imports_from_a_layer_above_its_own():
    assert upward(imports(ROOT)) == []


def test_gapscopes_own_packages_are_imported_by_the_gapscope_name_only():
    assert top_level_imports(ROOT) == []


def test_no_folder_level_holds_more_than_20_modules():
    assert crowded(ROOT) == {}


def test_every_subpackage_says_its_role_in_one_line():
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc and "\n" not in doc.strip(), init.relative_to(ROOT)


# The checks themselves, on a tiny hand-made package: each finds what it is there to find.

@pytest.fixture
def tree(tmp_path):
    def write(files: dict[str, str]) -> Path:
        for name, text in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        for package in PACKAGES:
            (tmp_path / package).mkdir(exist_ok=True)
        return tmp_path
    return write


def test_a_circle_is_found_lazy_imports_included(tree):
    root = tree({"analysis/model/a.py": "from gapscope.analysis.model.b import x\n",
                 "analysis/model/b.py": "def f():\n    from gapscope.analysis.model import a\n"})
    assert circles(imports(root)) == [["analysis.model.a", "analysis.model.b"]]


def test_a_javascript_circle_is_found(tree):
    """The circle the tab once had: index.js -> panels.js -> memory.js -> index.js."""
    root = tree({"analysis/static/index.js": "import {pairPanels} from './panels.js';\n",
                 "analysis/static/panels.js": "import {html} from './index.js';\nimport {memoryView} from './memory.js';\n",
                 "analysis/static/memory.js": "import {\n  html, notes,\n} from './index.js';\n",
                 "analysis/static/dom.js": "export function html() {}\n"})
    assert js_imports(root)["analysis/static/memory.js"] == {"analysis/static/index.js"}
    assert circles(js_imports(root)) == [["analysis/static/index.js", "analysis/static/memory.js",
                                          "analysis/static/panels.js"]]


def test_an_upward_import_is_found_and_a_downward_one_is_not(tree):
    root = tree({"profilers/low.py": "def f():\n    from gapscope.analysis.results.high import g\n",
                 "analysis/results/high.py": "from gapscope.profilers import low\n"
                                             "from gapscope.analysis.events import e\n",
                 "analysis/events/e.py": "",
                 "analysis/__init__.py": '"""Only a docstring: no module of its own."""\n'})
    assert upward(imports(root)) == ["profilers.low -> analysis.results.high"]


def test_a_folder_of_21_modules_is_crowded_and_one_of_20_is_not(tree):
    root = tree({**{f"workloads/m{i}.py": "" for i in range(21)},
                 **{f"analysis/readers/r{i}.py": "" for i in range(20)},
                 "analysis/readers/__init__.py": '"""Not counted."""\n'})
    assert crowded(root) == {"workloads": 21}


def test_a_bare_import_of_a_linked_package_is_found(tree):
    root = tree({"gapscope/a.py": "import analysis.model\nfrom gapscope.profilers import x\n",
                 "tests/t.py": "def f():\n    from cli import main\n"})
    assert top_level_imports(root) == ["gapscope/a.py:1 analysis.model", "tests/t.py:2 cli"]
