"""Which package modules a workflow script runs: its import closure, as rule code inputs, so
that editing a module reruns exactly the rules whose scripts run it, directly or not.

An import at a module's top level (or in a class) runs when the module is imported; one inside
a module-level function runs only where that function does: where the script or a running part
of another module names it (``module.f``, ``from module import f``), or a running part of its
own module does. So an experiment's module may import its plotting inside its summary, and its
training job does not rerun when a figure changes. A module imported in any other way (``import
d2lrepro.a.b``, ``import ... as``, a star) counts with every function. A module's ``if __name__ ==
"__main__":`` block runs only where the module is the program, as in the workers an experiment
starts from its own module: the job that starts them names the module's ``main`` (or passes the
module on), and that counts instead."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
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


EVERY = None  # every function of a module runs


def _names(node: ast.Import | ast.ImportFrom, path: Path, package_dir: Path) -> list[str]:
    """The dotted names an import statement may load (each as a module or a package)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative to the importing module's package
        here = path.resolve().parent.relative_to(package_dir.parent).parts
        here = here[: len(here) - (node.level - 1)]
        base = ".".join([*here, base] if base else here)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _sources(names, package_dir: Path) -> set[Path]:
    """The package's source files of ``names``, with every package ``__init__.py`` on the way,
    which Python runs first."""
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            source = module_file(".".join(parts[:i]), package_dir)
            if source is not None:
                found.add(source)
    return found


def _main_block(node: ast.AST) -> bool:
    """Whether ``node`` is an ``if __name__ == "__main__":`` block."""
    return isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"


@dataclass(frozen=True)
class _Part:
    """What one statement of a module holds, in the order ``ast.walk`` meets it: its import
    statements, and each name it reads with the attribute read of it (None: the bare name)."""

    imports: tuple[ast.Import | ast.ImportFrom, ...]
    names: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, statement: ast.AST) -> _Part:
        nodes = list(ast.walk(statement))
        attribute = {
            id(n.value): n.attr
            for n in nodes
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        }
        return cls(
            tuple(n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)),
            tuple((n.id, attribute.get(id(n))) for n in nodes if isinstance(n, ast.Name)),
        )


@dataclass(frozen=True)
class _Module:
    """A module's top-level statements, its ``__main__`` blocks and its functions, as parts."""

    top: tuple[_Part, ...]
    main: tuple[_Part, ...]
    functions: dict[str, _Part]


@functools.cache
def _module(path: Path, stamp: tuple[int, int]) -> _Module:
    """The parts of the module at ``path`` as it was at ``stamp`` (its mtime and size): a file
    is parsed once however many scripts import it."""
    tree = ast.parse(path.read_text(), str(path))
    functions = ast.FunctionDef | ast.AsyncFunctionDef
    statements = [n for n in tree.body if not isinstance(n, functions)]
    return _Module(
        tuple(_Part.of(n) for n in statements if not _main_block(n)),
        tuple(_Part.of(n) for n in statements if _main_block(n)),
        {n.name: _Part.of(n) for n in tree.body if isinstance(n, functions)},
    )


def _running(module: _Module, functions) -> list[_Part]:
    """The parts of a module that run: its top-level statements but its functions and, unless
    ``functions`` is :data:`EVERY`, its ``__main__`` blocks; and the functions of ``functions``
    (:data:`EVERY`: all) with those they name, in turn."""
    parts = list(module.top) + (list(module.main) if functions is EVERY else [])
    todo = list(module.functions) if functions is EVERY else list(functions)
    todo += [name for part in parts for name, _ in part.names]
    running: set[str] = set()
    while todo:
        name = todo.pop()
        if name in module.functions and name not in running:
            running.add(name)
            todo += [n for n, _ in module.functions[name].names]
    return parts + [module.functions[name] for name in sorted(running)]


def _uses(path: Path, functions, package_dir: Path) -> dict[Path, set[str] | None]:
    """The package modules the running parts of ``path`` import, each with the names it uses
    of them (:data:`EVERY` where it may use any); packages' ``__init__.py`` on the way count
    with every name. Kept for the next caller, who must not change it: a file is read once."""
    path = Path(path)
    stat = path.stat()
    names = EVERY if functions is EVERY else frozenset(functions)
    return _uses_of(path, (stat.st_mtime_ns, stat.st_size), names, package_dir)


@functools.cache
def _uses_of(path: Path, stamp, functions, package_dir: Path) -> dict[Path, set[str] | None]:
    parts = _running(_module(path, stamp), functions)
    uses: dict[Path, set[str] | None] = {}
    aliases: dict[str, Path] = {}

    def use(module: Path, names) -> None:
        if names is EVERY or uses.get(module, set()) is EVERY:
            uses[module] = EVERY
        else:
            uses[module] = uses.get(module, set()) | set(names)

    for node in (n for part in parts for n in part.imports):
        for source in _sources(_names(node, path, package_dir), package_dir):
            use(source, EVERY if source.name == "__init__.py" else set())
        if isinstance(node, ast.Import):
            for source in _sources([a.name for a in node.names], package_dir):
                use(source, EVERY)  # reached by its dotted name or an alias: anything
            continue
        base = _names(node, path, package_dir)[0]
        for alias in node.names:
            module = module_file(f"{base}.{alias.name}", package_dir)
            if alias.name == "*":
                use(module_file(base, package_dir) or path, EVERY)
            elif module is not None and module.name != "__init__.py":
                aliases[alias.asname or alias.name] = module
            elif (parent := module_file(base, package_dir)) is not None:
                use(parent, {alias.name})
    for name, attribute in (n for part in parts for n in part.names):
        if name in aliases:
            # module.f runs f; a module passed on as a value may run any of it
            use(aliases[name], EVERY if attribute is None else {attribute})
    uses.pop(path, None)
    return uses


def imported_modules(path: Path, package_dir: Path = PACKAGE_DIR) -> set[Path]:
    """Source files of the package that the Python file at ``path`` imports anywhere in it
    (``import d2lrepro.a.b``, ``from d2lrepro.a import b``, ``from d2lrepro.a.b import c``,
    and relative imports), with the ``__init__.py`` of every package on the way."""
    return set(_uses(path, EVERY, package_dir))


def ledger_modules(ledger: dict) -> list[str]:
    """The modules the ledger names by dotted path: the mappings of run names to the book's
    curve ids that the sections' ``compared_curves`` declare, which the comparison imports
    by name."""
    families = [s.get("compared_curves", {}) for s in ledger["sections"]]
    return sorted({f["curve_ids"].rpartition(".")[0] for f in families if "curve_ids" in f})


def module_files(names, root: Path) -> list[str]:
    """The source files of the dotted module ``names`` under ``root``, relative to it, sorted:
    the modules a script imports by name (``importlib.import_module``), which no import
    statement shows."""
    root = Path(root).resolve()
    package_dir = root / "workflow" / PACKAGE
    files = {name: module_file(name, package_dir) for name in names}
    unknown = sorted(name for name, file in files.items() if file is None)
    if unknown:
        raise ValueError(f"no module of {PACKAGE} is named {', '.join(unknown)}")
    return sorted({str(file.relative_to(root)) for file in files.values()})


def closure(script: Path, root: Path) -> list[str]:
    """The source files of the package under ``root`` (``workflow/d2lrepro``) that ``script``
    runs, relative to ``root``, sorted: every module it imports, and every module those import
    in their running parts, until nothing more runs."""
    root = Path(root).resolve()
    package_dir = root / "workflow" / PACKAGE
    running: dict[Path, set[str] | None] = {}
    todo = [(module, names) for module, names in _uses(script, EVERY, package_dir).items()]
    while todo:
        module, names = todo.pop()
        if module in running:
            known = running[module]
            if known is EVERY or (names is not EVERY and names <= known):
                continue
            names = EVERY if names is EVERY else known | names
        running[module] = names
        todo += list(_uses(module, names, package_dir).items())
    return sorted(str(f.relative_to(root)) for f in running)
