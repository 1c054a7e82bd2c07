"""Imports point down: every package imports only the layers below its own (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORMATS = {"remi", "groove"}  # the token formats' packages
FORMAT_NEUTRAL = {"generation"}  # packages that reach a format only through tokenization.BaseTokenizer


def layers() -> dict[str, int]:
    """{package: layer} as docs/architecture.md lists them ("layer N: a b c")."""
    text = (REPO / "docs" / "architecture.md").read_text()
    found = {name: int(number) for number, names in re.findall(r"layer (\d): ([a-z ]+)", text)
             for name in names.split()}
    assert found, "docs/architecture.md lists no layers"
    return found


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of the absolute imports of a file, those under `if TYPE_CHECKING:` left out."""
    tree = ast.parse(path.read_text())
    typing_only = {id(sub) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def test_no_package_imports_one_above_or_beside_it():
    rank = layers()
    wrong = []
    for package in [*rank, "bench"]:
        for path in sorted((REPO / package).rglob("*.py")):
            for line, module in runtime_imports(path):
                top = module.split(".")[0]
                if top not in rank or top == package:
                    continue
                if top == "apps" or (package != "bench" and rank[top] >= rank[package]):
                    wrong.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_format_neutral_packages_import_no_format():
    wrong = [f"{path.relative_to(REPO)}:{line} imports {module}"
             for package in sorted(FORMAT_NEUTRAL) for path in sorted((REPO / package).rglob("*.py"))
             for line, module in runtime_imports(path) if module.split(".")[0] in FORMATS]
    assert not wrong, "format-neutral packages importing a format:\n" + "\n".join(wrong)
