"""The house rules that a reader relies on, checked on the source: dependencies run one way
(scripts -> agents, sim_bridge -> datasets -> nac, and within agents/ along the flow of its
subpackages), no import circle between modules, and no private name (`_x`) imported from another
module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nac", "datasets", "agents", "sim_bridge", "scripts")
# Which of our packages each package may import (besides itself).
ALLOWED = {
    "nac": set(),
    "datasets": {"nac"},
    "agents": {"datasets", "nac"},
    "sim_bridge": {"agents", "datasets", "nac"},
    "scripts": {"agents", "sim_bridge", "datasets", "nac"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported module, names) for every import of ours in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] in PACKAGES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in PACKAGES:
            names = [a.name for a in node.names]
            # "from nac import layer" imports a module, "from nac import NAC" a name of nac/__init__
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in modules]
            found += [(s, []) for s in subs]
            rest = [n for n in names if f"{node.module}.{n}" not in modules]
            if rest:
                found.append((node.module, rest))
    return found


def graph() -> dict[str, set[str]]:
    modules = our_modules()
    return {m: {target for target, _ in imports(p, modules) if target != m} for m, p in modules.items()}


def test_packages_import_one_way():
    bad = []
    for m, targets in graph().items():
        pkg = m.split(".")[0]
        bad += [f"{m} -> {t}" for t in targets if t.split(".")[0] not in ALLOWED[pkg] | {pkg}]
    assert not bad, bad


def circles(g: dict[str, list[str]]) -> list[list[str]]:
    """The import circles of a graph {module: modules it imports}: Tarjan's strongly connected components of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert not circles(graph()), circles(graph())


def test_the_circle_detector_finds_a_circle_and_nothing_else():
    assert circles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": []}) == [["a", "b", "c"]]
    assert circles({"a": ["b"], "b": ["c"], "c": [], "d": ["a", "c"]}) == []
    with_ours = {**graph(), "agents.training.loop": [*graph()["agents.training.loop"], "agents.training.bc"]}  # loop -> bc -> loop
    assert any({"agents.training.loop", "agents.training.bc"} <= set(c) for c in circles(with_ours))


# agents/ in the order of the flow: each subpackage imports only from those before it (and nac, datasets)
AGENT_LAYERS = ("carracing", "experts", "driving", "evaluation", "training", "studies", "figures", "quickstart")


def test_agents_subpackages_follow_the_flow():
    layer = lambda m: AGENT_LAYERS.index(m.split(".")[1])  # noqa: E731
    agents = {m: t for m, t in graph().items() if m.startswith("agents.") and m != "agents"}
    assert {m.split(".")[1] for m in agents} == set(AGENT_LAYERS), "a module of agents/ outside the layers"
    bad = [f"{m} -> {t}" for m, targets in agents.items() for t in targets
           if t.startswith("agents.") and layer(t) > layer(m)]
    assert not bad, bad


def test_no_private_name_crosses_a_module():
    modules = our_modules()
    bad = [
        f"{m} imports {n} from {target}"
        for m, p in modules.items()
        for target, names in imports(p, modules)
        for n in names
        if n.startswith("_") and target != m
    ]
    assert not bad, bad


def private_names() -> set[str]:
    """Every `_name` our source defines: module-level functions, classes and constants, methods, and attributes set on
    self (dunders aside)."""
    names = set()
    for path in our_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {n for n in names if n.startswith("_") and len(n) > 1 and not n.startswith("__")}


def test_tests_use_no_private_name_of_ours():
    """Tests hold the public behaviour: no `_name` of our source imported, reached through a module or an object, or
    named as a string (monkeypatch.setattr)."""
    modules = our_modules()
    ours = private_names()
    bad = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases |= {a.asname or a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                for a in node.names:
                    if a.name.startswith("_"):
                        bad.append(f"{path.name}: from {node.module} import {a.name}")
                    elif f"{node.module}.{a.name}" in modules:
                        aliases.add(a.asname or a.name)
        own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}  # a test's own helpers
        own |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in ours and node.attr not in own:
                bad.append(f"{path.name}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Constant) and node.value in ours and node.value not in own:
                bad.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not bad, bad


def test_the_checker_sees_a_circle(tmp_path, monkeypatch):
    """The graph builder must find imports inside functions too (a lazy import is still a circle)."""
    src = "def f():\n    from agents.training.loop import fit\n"
    path = ROOT / "agents" / "training" / "loop.py"
    found = imports(path, our_modules()) + imports(_write(tmp_path, src), our_modules())
    assert ("agents.training.loop", ["fit"]) in found


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "x.py"
    p.write_text(text)
    return p


# Source modules whose tests live in another module's test file: where, and what in that file shows it (an import of
# the module, or the command that runs it). The commands (scripts/) are tested in tests/scripts/.
TESTED_ELSEWHERE = {
    "agents.experts.ppo_expert": ("tests/agents/experts/test_ppo.py", "make_expert"),  # the PPO expert is PPO's policy, driven
    "agents.figures.saliency": ("tests/agents/figures/test_video.py", "agents.figures.saliency"),  # the saliency a video overlays
    "agents.quickstart": ("tests/scripts/test_cli.py", '"quickstart"'),  # nacdrive quickstart end to end, both action spaces
    "agents.training.dagger_config": ("tests/agents/training/test_dagger.py", "agents.training.dagger_config"),  # its checks
    "agents.training.distributed": ("tests/agents/training/test_bc.py", "torchrun"),  # two gloo processes under torchrun
    "agents.training.throughput": ("tests/scripts/test_cli.py", '"bench", "train"'),  # nacdrive bench train, end to end
    "agents.training.trainers": ("tests/agents/training/test_bc.py", "agents.training.trainers"),  # train(), every test's entry
    "sim_bridge.config": ("tests/sim_bridge/test_carracing_sim.py", "sim_bridge.config"),  # the stand-in's options and checks
    "sim_bridge.standin": ("tests/sim_bridge/test_server.py", "sim_bridge.standin"),  # the Unity-like client of every bridge test
}


def test_every_source_module_has_a_test_module():
    """agents/x/y.py is tested in tests/agents/x/test_y.py, or TESTED_ELSEWHERE names where (and that file shows it)."""
    missing = []
    for name, path in our_modules().items():
        if path.name == "__init__.py" or name.startswith("scripts."):
            continue
        own = ROOT / "tests" / path.relative_to(ROOT).parent / f"test_{path.name}"
        if own.is_file():
            assert name not in TESTED_ELSEWHERE, f"{name} has {own.relative_to(ROOT)}: drop it from TESTED_ELSEWHERE"
            continue
        if name not in TESTED_ELSEWHERE:
            missing.append(name)
            continue
        where, evidence = TESTED_ELSEWHERE[name]
        assert evidence in (ROOT / where).read_text(), f"{where} is named as {name}'s tests but shows no {evidence}"
    assert not missing, f"source modules without a test module (tests/<package>/test_<module>.py) or an entry in TESTED_ELSEWHERE: {missing}"
