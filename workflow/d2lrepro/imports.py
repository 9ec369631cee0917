"""Which package modules a workflow script runs: its import closure, as rule code inputs, so
that editing a module reruns exactly the rules whose scripts import it, directly or not."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE = PACKAGE_DIR.name


def imported_modules(path: Path) -> set[str]:
    """Names of the package's modules that the Python file at ``path`` imports anywhere in it
    (``import d2lrepro.x``, ``from d2lrepro import x``, ``from d2lrepro.x import y``, and
    relative imports inside the package)."""
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: only package modules use them
                base = f"{PACKAGE}.{base}" if base else PACKAGE
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == PACKAGE and len(parts) > 1:
                if (PACKAGE_DIR / f"{parts[1]}.py").exists():
                    found.add(parts[1])
    return found


def closure(script: Path, root: Path) -> list[str]:
    """The package's source files that ``script`` runs, relative to ``root``, sorted; the
    package's ``__init__.py`` is among them whenever any module is."""
    seen: set[str] = set()
    todo = list(imported_modules(script))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imported_modules(PACKAGE_DIR / f"{module}.py")
    files = [PACKAGE_DIR / f"{m}.py" for m in seen] + (
        [PACKAGE_DIR / "__init__.py"] if seen else []
    )
    return sorted(str(f.relative_to(Path(root).resolve())) for f in files)
