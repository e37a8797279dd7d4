"""Which torch names gapscope's code uses (read from its source), and which a torch wheel defines (read from the wheel's Python files and stubs, never imported).

    python -m benchmarks.torch_api WHEEL --out tests/fixtures/torch_api/2.11.json

The snapshot lets a test hold gapscope against the oldest torch setup.cfg claims on a machine
that has only a newer one. Any platform's wheel of that version serves: the Python files are
the same in all (a macOS one is a tenth of the size of the Linux CUDA one)."""
from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# gapscope's own code: what runs on a user's (or the GPU device's) torch. Tests are not shipped.
SOURCES = ("analysis", "benchmarks", "gapscope", "profilers", "workloads", "cli.py")
# torch/__init__.py copies every name of torch._C._VariableFunctions into torch in a loop (and
# star-imports torch._C's): names no static reading of torch/__init__.py finds.
_DYNAMIC_EXPORTS = {"torch": ("torch._C._VariableFunctions", "torch._C")}


def used_names(root: Path = ROOT) -> dict[str, list[str]]:
    """Dotted torch names (`torch.cuda.Event`, `torch.distributed.init_process_group`) the code
    imports or reaches by attribute from an imported torch module, each with where."""
    found: dict[str, list[str]] = {}
    for path in _files(root):
        tree = ast.parse(path.read_text(), str(path))
        aliases = {**_from_imports(tree), **_aliases(tree)}  # `from torch import nn`: nn.Linear
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
                for alias in node.names:
                    if alias.name != "*":
                        _add(found, f"{node.module}.{alias.name}", path, node, root)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch":
                        _add(found, alias.name, path, node, root)
            elif isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent", None), ast.Attribute):
                name = _dotted(node, aliases)
                if name:
                    _add(found, name, path, node, root)
            for child in ast.iter_child_nodes(node):
                child._parent = node
    return found


def used_calls(root: Path = ROOT) -> dict[str, dict]:
    """Torch functions and classes the code calls with keyword arguments: {dotted name:
    {"keywords": [...], "where": [...]}} (a keyword newer than the floor fails there)."""
    found: dict[str, dict] = {}
    for path in _files(root):
        tree = ast.parse(path.read_text(), str(path))
        imported = _from_imports(tree)
        aliases = {**imported, **_aliases(tree)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.keywords):
                continue
            func = node.func
            name = (_dotted(func, aliases) if isinstance(func, ast.Attribute)
                    else imported.get(func.id) if isinstance(func, ast.Name) else None)
            keywords = {k.arg for k in node.keywords if k.arg is not None}  # not **options
            if name and keywords:
                entry = found.setdefault(name, {"keywords": set(), "where": []})
                entry["keywords"] |= keywords
                entry["where"].append(f"{path.relative_to(root)}:{node.lineno}")
    return {n: {"keywords": sorted(e["keywords"]), "where": e["where"]} for n, e in found.items()}


def _files(root: Path) -> list[Path]:
    return sorted(p for s in SOURCES for p in ((root / s).rglob("*.py") if (root / s).is_dir()
                                               else [root / s] if (root / s).is_file() else []))


def _from_imports(tree) -> dict[str, str]:
    """Local names bound by `from torch.x import y [as z]`: z -> torch.x.y."""
    return {alias.asname or alias.name: f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch"
            for alias in node.names if alias.name != "*"}


def _aliases(tree) -> dict[str, str]:
    """Local names bound to torch modules: `import torch`, `import torch.distributed as dist`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    names[alias.asname or "torch"] = alias.name if alias.asname else "torch"
    return names


def _dotted(node: ast.Attribute, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def _add(found, name: str, path: Path, node, root: Path) -> None:
    found.setdefault(name, []).append(f"{path.relative_to(root)}:{node.lineno}")


def wheel_names(wheel: Path, wanted_modules: set[str], wanted_calls=()) -> dict:
    """{"version", "modules": every module of the wheel, "names": {module: its top-level names}}
    for the modules in `wanted_modules` and every module they star-import from."""
    with zipfile.ZipFile(wheel) as archive:
        sources, packages = {}, set()
        for info in archive.infolist():
            name = info.filename
            if name.startswith("torch/") and name.endswith((".py", ".pyi")):
                module = name[:-4 if name.endswith(".pyi") else -3].replace("/", ".")
                if module.endswith(".__init__"):
                    module = module.removesuffix(".__init__")
                    packages.add(module)
                sources.setdefault(module, []).append(archive.read(info).decode("utf-8", "replace"))
        metadata = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
        version = "?" if metadata is None else next(
            (line.split(":", 1)[1].strip() for line in archive.read(metadata).decode().splitlines()
             if line.startswith("Version:")), "?")
    names: dict[str, list[str]] = {}

    def defined(module: str, seen: frozenset = frozenset()) -> set[str]:
        if module in seen:
            return set()
        out: set[str] = set()
        for text in sources.get(module, []):
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            for node in tree.body:
                out |= _top_level(node, module, module in packages, lambda m: defined(m, seen | {module}))
        for extra in _DYNAMIC_EXPORTS.get(module, ()):
            out |= defined(extra, seen | {module})
        return out

    for module in sorted(wanted_modules):
        if module in sources:
            names[module] = sorted(defined(module))
    signatures = {name: _signature(name, sources, packages) for name in sorted(wanted_calls)}
    return {"version": version, "modules": sorted(sources), "names": names, "signatures": signatures}


def _signature(name: str, sources: dict, packages: set, depth: int = 0) -> list[str] | None:
    """The parameter names a torch function or class takes, ["**"] where it takes any keyword,
    None where the wheel's Python does not tell (a C function without a stub, an inherited
    __init__). Followed through `from .x import name` re-exports."""
    parts = name.split(".")
    cut = max((i for i in range(1, len(parts)) if ".".join(parts[:i]) in sources), default=0)
    if depth > 8 or cut != len(parts) - 1:
        return None  # a method of a class, or no module: not read
    module, leaf = ".".join(parts[:cut]), parts[-1]
    params: set[str] = set()
    found, stars = False, list(_DYNAMIC_EXPORTS.get(module, ()))
    for text in sources[module]:
        for node in _bindings(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == leaf:
                found = True
                params |= _params(node)
            elif isinstance(node, ast.ClassDef) and node.name == leaf:
                inits = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
                if not inits:
                    return None
                found = True
                for init in inits:
                    params |= _params(init)
            elif isinstance(node, ast.ImportFrom) and not found:
                source = _absolute(node, module, module in packages)
                for alias in node.names:
                    if alias.name == "*":
                        stars.append(source)
                    elif (alias.asname or alias.name) == leaf:
                        return _signature(f"{source}.{alias.name}", sources, packages, depth + 1)
    if found:
        return sorted(params)
    for source in stars:  # `from .distributed_c10d import *`, torch's names from torch._C
        if source in sources:
            signature = _signature(f"{source}.{leaf}", sources, packages, depth + 1)
            if signature is not None:
                return signature
    return None


def _bindings(tree):
    """Module-level statements, those inside if/try blocks too."""
    for node in tree.body:
        if isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *[h.body for h in getattr(node, "handlers", [])]):
                yield from _bindings(ast.Module(body=block, type_ignores=[]))
        else:
            yield node


def _params(function) -> set[str]:
    args = function.args
    if args.kwarg is not None:
        return {"**"}
    return {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs} - {"self", "cls"}


def _top_level(node, module: str, package: bool, star) -> set[str]:
    """Names a module-level statement binds (inside if/try blocks too: version switches)."""
    out = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name):
                    out.add(sub.id)
    elif isinstance(node, ast.Import):
        out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    elif isinstance(node, ast.ImportFrom):
        for alias in node.names:
            if alias.name == "*":
                base = _absolute(node, module, package)
                if base:
                    out |= star(base)
            else:
                out.add(alias.asname or alias.name)
    elif isinstance(node, (ast.If, ast.Try, ast.With)):
        for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                      *[h.body for h in getattr(node, "handlers", [])]):
            for child in block:
                out |= _top_level(child, module, package, star)
    return out


def _absolute(node: ast.ImportFrom, module: str, package: bool) -> str:
    """The module a (relative) `from ... import *` names: level 1 is a package's own self."""
    if node.level == 0:
        return node.module
    parts = module.split(".")
    base = parts[:len(parts) - node.level + (1 if package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def modules_of(names) -> set[str]:
    """Every dotted prefix of the names: the modules they might live in."""
    out = set()
    for name in names:
        parts = name.split(".")
        out |= {".".join(parts[:i]) for i in range(1, len(parts))} | {name}
    return out


def missing(used: dict[str, list[str]], snapshot: dict) -> list[str]:
    """The used names the snapshot's torch does not have, each with where it is used. A name is
    checked up to its module's top-level name: `torch.cuda.Event.record` needs `torch.cuda` to
    define `Event`; what the class itself holds is not read."""
    modules = set(snapshot["modules"])
    problems = []
    for name, where in sorted(used.items()):
        parts = name.split(".")
        cut = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules or i == 1)
        module = ".".join(parts[:cut])
        if cut == len(parts):
            continue  # the name is a module of that torch
        if module not in snapshot["names"]:
            problems.append(f"{name} ({where[0]}): module {module} not in the snapshot; regenerate it "
                            "(python -m benchmarks.torch_api WHEEL)")
        elif parts[cut] not in snapshot["names"][module]:
            problems.append(f"{name} ({where[0]}): torch {snapshot['version']} has no {module}.{parts[cut]}")
    return problems


def bad_keywords(calls: dict[str, dict], snapshot: dict) -> list[str]:
    """Keyword arguments the snapshot's torch does not take, each with where it is passed; a
    call the snapshot has no signature entry for asks for a new snapshot."""
    problems = []
    signatures = snapshot.get("signatures", {})
    for name, call in sorted(calls.items()):
        if name not in signatures:
            problems.append(f"{name} ({call['where'][0]}): not in the snapshot's signatures; "
                            "regenerate it (python -m benchmarks.torch_api WHEEL)")
            continue
        params = signatures[name]
        if params is None or "**" in params:
            continue  # the wheel's Python does not say, or any keyword goes
        unknown = [k for k in call["keywords"] if k not in params]
        if unknown:
            problems.append(f"{name}({', '.join(k + '=' for k in unknown)}) ({call['where'][0]}): "
                            f"torch {snapshot['version']} takes no such keyword")
    return problems


class _Args(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as gapscope's commands do
        print(f"torch_api: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None) -> int:
    parser = _Args(prog="python -m benchmarks.torch_api", description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not zipfile.is_zipfile(args.wheel):
        print(f"torch_api: error: {args.wheel}: not a wheel", file=sys.stderr)
        return 2
    used, calls = used_names(), used_calls()
    snapshot = wheel_names(args.wheel, modules_of(used), calls)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(snapshot, indent=0, sort_keys=True) + "\n")
    problems = missing(used, snapshot) + bad_keywords(calls, snapshot)
    known = sum(v is not None for v in snapshot["signatures"].values())
    print(f"{args.out}: torch {snapshot['version']}, {len(snapshot['names'])} modules' names; "
          f"{len(used)} names used; {known} of {len(calls)} called with keywords have a signature "
          f"in the wheel's Python; {len(problems)} problems")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
