"""Which package modules a workflow script runs: its import closure, as rule code inputs, so
that editing a module reruns exactly the rules whose scripts import it, directly or not."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = PACKAGE_DIR.name


def module_file(name: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The source file of dotted module ``name`` (``d2lrepro.core.data``) under
    ``package_dir``: a module's ``.py`` or a subpackage's ``__init__.py``; None if neither."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if len(parts) > 1 and candidate.is_file():
            return candidate
    return base / "__init__.py" if len(parts) == 1 else None


def imported_modules(path: Path, package_dir: Path = PACKAGE_DIR) -> set[Path]:
    """Source files of the package that the Python file at ``path`` imports anywhere in it
    (``import d2lrepro.a.b``, ``from d2lrepro.a import b``, ``from d2lrepro.a.b import c``,
    and relative imports), with the ``__init__.py`` of every package on the way, which Python
    runs first."""
    path = Path(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the importing module's package
                here = path.resolve().parent.relative_to(package_dir.parent).parts
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                source = module_file(".".join(parts[:i]), package_dir)
                if source is not None:
                    found.add(source)
    return found


def closure(script: Path, root: Path) -> list[str]:
    """The source files of the package under ``root`` (``workflow/d2lrepro``) that ``script``
    runs, relative to ``root``, sorted."""
    root = Path(root).resolve()
    package_dir = root / "workflow" / PACKAGE
    seen: set[Path] = set()
    todo = list(imported_modules(script, package_dir))
    while todo:
        source = todo.pop()
        if source not in seen:
            seen.add(source)
            todo += imported_modules(source, package_dir)
    return sorted(str(f.relative_to(root)) for f in seen)
