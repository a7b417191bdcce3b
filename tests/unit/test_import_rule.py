"""DESIGN.md §6: the pure core imports only the standard library, pydantic and pure helpers —
and, as the only evaluators, the embedded JavaScript (QuickJS) and jq engines."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_THIRD_PARTY = {"pydantic", "pydantic_core", "jsonpath", "typing_extensions", "quickjs", "jq"}
ALLOWED_FIRST_PARTY = ("shared.core", "shared.models")


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def violations(package_dirs: list[Path]) -> list[str]:
    bad = []
    for package in package_dirs:
        for path in package.rglob("*.py"):
            for name in imports_of(path):
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY:
                    continue
                if name.startswith(ALLOWED_FIRST_PARTY):
                    continue
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


def test_core_and_models_import_no_io() -> None:
    assert violations([ROOT / "shared" / "core", ROOT / "shared" / "models"]) == []


def test_rule_catches_a_forbidden_import(tmp_path: Path) -> None:
    fake = tmp_path / "core"
    fake.mkdir()
    (fake / "bad.py").write_text("import aiokafka\nfrom pymongo import AsyncMongoClient\nimport fastapi\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(violations([fake])) == 3
    finally:
        ROOT = saved
