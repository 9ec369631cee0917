"""Which package modules a workflow script runs: its import closure, as rule code inputs, so
that editing a module reruns exactly the rules whose scripts import it, directly or not."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE = PACKAGE_DIR.name


def imported_modules(path: Path, package_dir: Path = PACKAGE_DIR) -> set[str]:
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
                if (package_dir / f"{parts[1]}.py").exists():
                    found.add(parts[1])
    return found


def closure(script: Path, root: Path) -> list[str]:
    """The source files of the package under ``root`` (``workflow/d2lrepro``) that ``script``
    runs, relative to ``root``, sorted; ``__init__.py`` and its imports are among them whenever
    any module is."""
    root = Path(root).resolve()
    package_dir = root / "workflow" / PACKAGE
    seen: set[str] = set()
    todo = list(imported_modules(script, package_dir))
    if todo:  # importing any module runs the package's __init__ first, and what it imports
        todo += imported_modules(package_dir / "__init__.py", package_dir)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imported_modules(package_dir / f"{module}.py", package_dir)
    files = [package_dir / f"{m}.py" for m in seen]
    files += [package_dir / "__init__.py"] if seen else []
    return sorted(str(f.relative_to(root)) for f in files)
