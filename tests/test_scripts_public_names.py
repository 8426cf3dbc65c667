"""scripts/ uses autotune's public names only: a private one (a leading underscore) is the package's to
rename, and a script that reaches it breaks when it does (another script's private names likewise).
Every script is parsed, not grepped, so that an alias (`from autotune import api as a`) or an object
made by the package (`bench = Bench()`) is followed to the private name it reaches."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# The scripts import one another as top-level modules (`from results_table import table`): a private
# name of one is no more another's to reach than the package's.
SIBLINGS = frozenset(path.stem for path in SCRIPTS.glob("*.py"))


def _from_autotune(module: str | None) -> bool:
    return module is not None and (module == "autotune" or module.startswith("autotune.") or module in SIBLINGS)


class _PrivateNames(ast.NodeVisitor):
    """Collects "line: what" for each private autotune name the source reaches. A name is autotune's
    where an import binds it, where it is assigned what an autotune name's call returns (an object the
    package made) and where a parameter is annotated with one; the names of a file are not told apart
    by scope, which errs towards saying too much."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.found: list[str] = []

    def scan(self, tree: ast.AST) -> list[str]:
        # Bindings first (a function may use a name imported below it), to a fixed point for chains
        # such as `store = api.store(db)` then `rows = store.tuned(...)`.
        while True:
            before = len(self.bound)
            for node in ast.walk(tree):
                self._bind(node)
            if len(self.bound) == before:
                break
        self.visit(tree)
        return self.found

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _from_autotune(alias.name):
                    self.bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and _from_autotune(node.module):
            self.bound.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and self._made_by_autotune(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            self.bound.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.arg) and node.annotation is not None and self._reaches(node.annotation):
            self.bound.add(node.arg)

    def _made_by_autotune(self, node: ast.AST | None) -> bool:
        """Whether the expression is an object an autotune name made: `Bench()`, `api.store(db)`. Not
        any attribute of one (`bench.torch` is torch, whose private names are not autotune's)."""
        if not isinstance(node, ast.Call):
            return False
        func = node.func.value if isinstance(node.func, ast.Attribute) else node.func
        return isinstance(func, ast.Name) and func.id in self.bound

    def _reaches(self, node: ast.AST) -> bool:
        """Whether the expression starts from an autotune name: `Bench()`, `api.store(db)`, `x.timer`."""
        while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
            return node.value.split(".")[0].split("[")[0] in self.bound
        return isinstance(node, ast.Name) and node.id in self.bound

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if _from_autotune(node.module):
            assert node.module is not None
            for part in node.module.split("."):
                if _private(part):
                    self.found.append(f"{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    self.found.append(f"{node.lineno}: from {node.module} import {alias.name}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _from_autotune(alias.name) and any(_private(part) for part in alias.name.split(".")):
                self.found.append(f"{node.lineno}: import {alias.name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _private(node.attr) and self._reaches(node.value):
            self.found.append(f"{node.lineno}: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        # getattr(api, "_RUNTIME"), setattr(runtime, "_choose", ...): the same reach, spelled as a string.
        accessor = isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
        if accessor and len(node.args) >= 2 and self._reaches(node.args[0]):
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                self.found.append(f"{node.lineno}: {ast.unparse(node)}")
        self.generic_visit(node)


def private_names(source: str) -> list[str]:
    return _PrivateNames().scan(ast.parse(source))


@pytest.mark.parametrize(
    "source",
    [
        "from autotune import api\napi._RUNTIME",
        "from autotune import api as a\ndef f():\n    return a._choose_on(1, 2, 3)",
        "from autotune.bench.compare import _max_error",
        "import autotune.api\nautotune.api._default_opened.is_set()",
        "from autotune.bench.compare import Bench\nbench = Bench()\nbench._copies(4)",
        "from autotune.store import open_store\ndef f(db):\n    store = open_store(db)\n    return store._started",
        "from autotune.bench.compare import Bench\ndef f(bench: Bench):\n    return bench.timer._spin",
        "from autotune import api\nstore = api.store(None)\nstore._started",
        "from autotune import api\ngetattr(api, '_RUNTIME')",
        "from results_table import _FAMILY_BY_PARAM",
    ],
)
def test_the_check_finds_a_private_name(source: str) -> None:
    assert private_names(source), source


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ntorch._dynamo.reset()",  # another package's private names are not autotune's to keep
        "from autotune import api\napi.launch_path()\nclass A:\n    def f(self):\n        return self._x",
        "from autotune.bench import harness\nharness.write_json.__name__",
        "from autotune.bench.compare import Bench\ntorch = Bench().torch\ntorch._C._cuda_getCurrentRawStream",
    ],
)
def test_the_check_passes_public_names(source: str) -> None:
    assert private_names(source) == []


def test_scripts_name_no_private_autotune_name() -> None:
    found = [
        f"scripts/{path.name}:{where}"
        for path in sorted(SCRIPTS.glob("*.py"))
        for where in private_names(path.read_text(encoding="utf-8"))
    ]
    assert not found, "scripts reach private autotune names (make them public in the package):\n" + "\n".join(found)
