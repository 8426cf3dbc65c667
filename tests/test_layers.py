"""The import rules pyproject.toml's [tool.importlinter] contracts state, checked on every test run:
cuBLASLt is one more kernel family (autotune/ops/cublas/), which only its own folder, the registry
that registers it and the selection policy import; everything else reaches it through the registry
of library families (autotune/ops/library.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autotune"
FAMILY = "autotune.ops.cublas"
# Outside the family's folder: the registry (ops/__init__.py) and the selection policy.
MAY_IMPORT_THE_FAMILY = {"autotune/ops/__init__.py", "autotune/select/choose.py"}


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
