"""The import graph of ``tqgguf/`` (docs/ARCHITECTURE.md): no cycles, and the layers point
one way. Every import counts, including those inside functions."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tqgguf"


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path = PKG) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """module -> the tqgguf modules it imports (anywhere in its body). ``from pkg import x``
    counts as importing ``pkg.x`` when that is a module, else ``pkg``."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".")
                    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                while t and t not in mods:  # "tqgguf.x.y" where y is a name: the module is tqgguf.x
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
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
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_the_graph_sees_function_local_and_relative_imports(tmp_path):
    pkg = tmp_path / "tqgguf"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text("from .sub.c import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import thing\n")
    (pkg / "sub" / "c.py").write_text("import tqgguf.a\nthing = 1\n")
    g = import_graph(pkg)
    assert g["tqgguf.a"] == {"tqgguf.b"}
    assert g["tqgguf.b"] == {"tqgguf.sub.c"}
    assert g["tqgguf.sub"] == {"tqgguf.sub.c"}
    assert find_cycles(g) == [["tqgguf.a", "tqgguf.b", "tqgguf.sub.c"]]


def test_tqgguf_has_no_import_cycle():
    cycles = find_cycles(import_graph())
    assert cycles == [], "import cycles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_graph_covers_the_package():
    g = import_graph()
    assert {"tqgguf.runtime", "tqgguf.kcenter", "tqgguf.center", "tqgguf.builder.source", "tqgguf.fsutil"} <= set(g)
    assert "tqgguf.engine" in g["tqgguf.kcenter"]  # a function-local import would count too


@pytest.mark.parametrize("low,forbidden", [
    ("tqgguf.fsutil", "tqgguf."),                       # imports nothing of ours
    ("tqgguf.reference", "tqgguf."),                    # pure numpy, runs without the engine
    ("tqgguf.builder", "tqgguf.runtime"),               # the build never uses what it builds
    ("tqgguf.builder", "tqgguf.engine"),
    ("tqgguf.cachetypes", "tqgguf."),
    ("tqgguf.variables", "tqgguf."),                    # the variable list imports nothing of ours
    ("tqgguf.config", "tqgguf.runtime"),                # settings are plain data
    ("tqgguf.config", "tqgguf.server"),
    ("tqgguf.config", "tqgguf.engine"),                 # ...and never reach the engine
    ("tqgguf.config", "tqgguf.kcenter"),
    ("tqgguf.runtime", "tqgguf.commands"),              # the library never imports the CLI
    ("tqgguf.quality", "tqgguf.commands"),
    ("tqgguf.server", "tqgguf.commands"),
    ("tqgguf.sweep", "tqgguf.commands"),
    ("tqgguf.server.child", "tqgguf.server.runner"),    # a process knows nothing of who runs it
    ("tqgguf.server.runner", "tqgguf.server.manager"),  # one model's child, not which models are loaded
    ("tqgguf.server.load_options", "tqgguf.server.runner"),  # Ollama's options are data
    ("tqgguf.server.ollama", "tqgguf.server.runner"),   # translating a request starts nothing
])
def test_layers_point_one_way(low, forbidden):
    g = import_graph()
    reached = set().union(*(_reaches(g, m) | {m} for m in g if m == low or m.startswith(low + ".")))
    own = {m for m in g if m == low or m.startswith(low + ".")}
    bad = sorted(m for m in reached - own if m == forbidden or m.startswith(forbidden.rstrip(".") + "."))
    assert bad == [], f"{low} reaches {bad}"


def _third_party_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out - set(sys.stdlib_module_names) - {"tqgguf"}


def test_shapes_needs_only_numpy_gguf_and_the_leaves():
    """tqgguf.shapes runs on the GPU machine's bare Python (scripts/gpu/write_shape.py): of ours
    it reaches only the leaves, of others only numpy and gguf."""
    g = import_graph()
    leaves = set(LAYERS[0])
    reached = _reaches(g, "tqgguf.shapes")
    assert {m for m in reached if not any(m == x or m.startswith(x + ".") for x in leaves)} == set()
    assert _third_party_imports(PKG / "shapes.py") <= {"numpy", "gguf"}
    for m in reached:
        assert _third_party_imports(_modules()[m]) <= {"numpy", "gguf"}, m


def test_setting_values_reach_only_the_cache_type_registry():
    """tqgguf.values (the parsers every setting and verb share) stays a near-leaf."""
    assert _reaches(import_graph(), "tqgguf.values") == {"tqgguf.cachetypes"}


#: The layers of docs/ARCHITECTURE.md, lowest first. A module may import its own layer and
#: the ones below. A new module must be placed here (and in the doc) to pass.
LAYERS: list[tuple[str, ...]] = [
    ("tqgguf.cachetypes", "tqgguf.fsutil", "tqgguf.reference"),                        # leaves
    ("tqgguf.config", "tqgguf.values", "tqgguf.variables", "tqgguf.kvplan", "tqgguf.models", "tqgguf.ollama_store",
     "tqgguf.shapes", "tqgguf.texts", "tqgguf.builder"),                                # data, build
    ("tqgguf.engine", "tqgguf.enginevars", "tqgguf.devices"),                           # engine access
    ("tqgguf.runtime", "tqgguf.kcenter"),                                               # engine use
    ("tqgguf.server", "tqgguf.sweep", "tqgguf.quality", "tqgguf.center", "tqgguf.bench", "tqgguf.mix"),  # features
    ("tqgguf.cli", "tqgguf.commands", "tqgguf.__main__"),                               # CLI
]


def _layer(mod: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(mod == n or mod.startswith(n + ".") for n in names):
            return i
    return None


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_layers():
    g = import_graph()
    unplaced = sorted(m for m in g if m != "tqgguf" and _layer(m) is None)
    assert unplaced == [], f"place these modules in LAYERS and docs/ARCHITECTURE.md: {unplaced}"
    upward = sorted(f"{m} -> {t}" for m, ts in g.items() if m != "tqgguf" for t in ts
                    if t != "tqgguf" and _layer(t) > _layer(m))
    assert upward == [], "imports against the layering: " + ", ".join(upward)


#: Why each declared dependency is there: the import name tqgguf uses, or who needs it.
NOT_IMPORTED_BY_TQGGUF = {
    "scikit-build-core": "builds the llama-cpp-python sdist (pip wheel --no-build-isolation)",
    "cmake": "builds the engine and the tools",
    "ninja": "builds the engine and the tools",
    "typing-extensions": "imported by the llama_cpp wheel we install with --no-deps",
    "diskcache": "imported by the llama_cpp wheel we install with --no-deps",
    "jinja2": "imported by the llama_cpp wheel we install with --no-deps",
    "httptools": "uvicorn's C HTTP parser, which uvicorn uses when it is installed (serve's CPU per request)",
}


def _declared_dependencies() -> list[str]:
    import re

    text = (PKG.parent / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    return [re.match(r"[A-Za-z0-9_.-]+", s).group(0).lower()
            for s in re.findall(r'"([^"]+)"', block)]


def test_every_declared_dependency_has_a_job():
    imported = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
    deps = _declared_dependencies()
    assert "click" in deps and "fastapi" in deps  # the parse found the list
    idle = [d for d in deps if d not in NOT_IMPORTED_BY_TQGGUF and d.replace("-", "_") not in imported]
    assert idle == [], f"declared but imported nowhere in tqgguf/: {idle}"
