"""The import rules pyproject.toml's [tool.importlinter] contracts state, checked on every test run:
the layers of autotune/, each importing only those below it (docs/design.md, "Layers"), and
cuBLASLt as one more kernel family (autotune/ops/cublas/), which only its own folder, the registry
that registers it and the selection policy import; everything else reaches it through the registry
of library families (autotune/ops/library.py)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autotune"
FAMILY = "autotune.ops.cublas"
# Outside the family's folder: the registry (ops/__init__.py) and the selection policy.
MAY_IMPORT_THE_FAMILY = {"autotune/ops/__init__.py", "autotune/select/choose.py"}
# The only exceptions a contract may make ("importer -> imported": why), each justified here: none.
JUSTIFIED_IGNORES: dict[str, str] = {}
# Top-level modules outside the layers: `python -m autotune`, which only runs the CLI.
OUTSIDE_THE_LAYERS = {"autotune.__main__"}


def _imported(path: Path) -> set[str]:
    """Every module an `import` or `from ... import` of this file names (at any depth of the code)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_import_linter_keeps_every_contract() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_only_the_family_the_registry_and_the_selection_policy_import_cublas() -> None:
    """Also the modules the contract's list leaves out (a new package) and imports inside functions."""
    reaching = sorted(
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if not path.is_relative_to(PACKAGE / "ops" / "cublas")
        and str(path.relative_to(ROOT)) not in MAY_IMPORT_THE_FAMILY
        and any(name == FAMILY or name.startswith(f"{FAMILY}.") for name in _imported(path))
    )
    assert reaching == []


def _vendor_tests(path: Path) -> list[str]:
    """Names and literals of a file that test for cuBLASLt itself: an `is_vendor`, the family's config
    key or its source hash's prefix as a value (not in prose)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef):
            name = (
                node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.name
            )
            if name == "is_vendor":
                found.append(name)
        elif isinstance(node, ast.Constant) and node.value in ("cublas_algo", "cublasLt-"):
            found.append(str(node.value))
    return found


def test_no_module_outside_the_family_asks_whether_a_config_is_the_vendors() -> None:
    """The registry answers which family a config or a source belongs to (ops.library_for,
    ops.library_of_source); no module keeps a cuBLASLt test of its own."""
    outside = [p for p in PACKAGE.rglob("*.py") if not p.is_relative_to(PACKAGE / "ops" / "cublas")]
    asking = sorted(f"{path.relative_to(ROOT)}: {word}" for path in outside for word in _vendor_tests(path))
    assert asking == []


def _contracts() -> list[dict[str, Any]]:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib: 3.11+")
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layers() -> list[str]:
    """The layers contract's layers, top first, as written ("autotune.bench | autotune.display")."""
    (contract,) = [c for c in _contracts() if c["type"] == "layers"]
    return list(contract["layers"])


def test_no_contract_ignores_an_import_it_does_not_justify() -> None:
    ignored = {entry for contract in _contracts() for entry in contract.get("ignore_imports", [])}
    assert ignored <= set(JUSTIFIED_IGNORES), sorted(ignored - set(JUSTIFIED_IGNORES))


def test_every_top_level_module_is_in_a_layer() -> None:
    """A new package or module of autotune/ is placed in the layers, not left outside unchecked."""
    layered = {name.strip() for layer in _layers() for name in re.split(r"[|:]", layer)}
    top_level = {
        f"autotune.{path.stem if path.is_file() else path.name}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert top_level - OUTSIDE_THE_LAYERS == layered


def test_the_design_documents_picture_is_the_contracts_order() -> None:
    """docs/design.md's "Layers" picture: one line a layer, top first, its modules before the gap."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    pictured = [re.split(r"\s{2,}", line.strip())[0] for line in section.splitlines() if line.startswith("    ")]
    assert pictured == [layer.replace("autotune.", "") for layer in _layers()]


def test_no_two_modules_below_the_top_layer_import_each_other() -> None:
    """Below the surfaces, no loop of imports, however long (docs/design.md says so)."""
    import grimp

    graph = grimp.build_graph("autotune", cache_dir=None)
    top = {name.strip() for name in re.split(r"[|:]", _layers()[0])}
    below = {m for m in graph.modules if m != "autotune" and not any(m == t or m.startswith(f"{t}.") for t in top)}
    imports = {m: set(graph.find_modules_directly_imported_by(m)) & below for m in below}
    loops = [sorted(group) for group in _strongly_connected(imports) if len(group) > 1]
    assert loops == []


def _strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups
