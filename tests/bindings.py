"""Calls of the package's functions that would not bind to their signatures, found without
running the code (tests/test_bindings.py): a call of a CUDA path that no machine without a GPU
runs still fails here when a parameter it passes was renamed or dropped.

A call is checked when its callee resolves to a function or class of the ``d2lrepro`` package:
a name imported from it (``from d2lrepro.x import mod``, ``import d2lrepro.x as y``, ``from
d2lrepro.x.mod import f``), attributes of such a name, or, in the package's own modules, a
function or class defined at the top of the module. Its arguments are bound to the real
signature (``inspect.signature(...).bind``), ``**NAME`` expanded where ``NAME`` is a dict of
the same file's top level written out (``{...}``, ``dict(...)``, ``{**A, "k": v}``). What
cannot be known is left out, never guessed: a name also bound otherwise in its scope, a
``**`` of anything else (then missing arguments are not judged), a ``*args`` (then only the
keywords' names are), and the calls inside ``with pytest.raises(...)``, which fail on purpose.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "d2lrepro"
SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
UNKNOWN = object()  # a name bound by something other than one import or definition


@dataclass(frozen=True)
class Unbound:
    """A call that does not bind: where, what it calls, and why not."""

    path: str
    line: int
    callee: str
    error: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.callee}: {self.error}"


def _outside(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.AST]:
    """The parts of a definition that run in the scope around it: decorators, defaults,
    base classes."""
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    return [*node.decorator_list, *defaults]


def _bindings(scope: ast.AST, module: str) -> dict[str, object]:
    """What each name bound directly in ``scope`` (not in the scopes inside it) refers to:
    the dotted target of an import or of a top-level definition of ``module``, else UNKNOWN
    (also for a name bound twice to different things)."""
    found: dict[str, object] = {}

    def bind(name: str, target: object) -> None:
        found[name] = target if found.get(name, target) == target else UNKNOWN

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bind(alias.asname, alias.name)
                else:  # `import a.b` binds `a`
                    bind(alias.name.split(".")[0], alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                known = node.level == 0 and node.module and alias.name != "*"
                bind(
                    alias.asname or alias.name, f"{node.module}.{alias.name}" if known else UNKNOWN
                )
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bind(node.name, f"{module}.{node.name}" if top and module else UNKNOWN)
            for child in _outside(node):
                visit(child, False)
            return  # its body is a scope of its own
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bind(node.id, UNKNOWN)
        elif isinstance(node, ast.arg):
            bind(node.arg, UNKNOWN)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bind(node.name, UNKNOWN)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                bind(name, UNKNOWN)
        elif isinstance(node, (ast.Lambda, *COMPREHENSIONS)):
            return
        for child in ast.iter_child_nodes(node):
            visit(child, False)

    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        for arg in ast.walk(scope.args):
            if isinstance(arg, ast.arg):
                bind(arg.arg, UNKNOWN)
    if isinstance(scope, COMPREHENSIONS):
        for generator in scope.generators:
            visit(generator.target, False)
        return found
    body = scope.body if isinstance(scope.body, list) else [scope.body]
    for statement in body:
        visit(statement, isinstance(scope, ast.Module))
    return found


def _dict_keys(node: ast.AST, top: dict[str, ast.AST], seen=()) -> set[str] | None:
    """The keys of a dict written out in ``node`` (through the top-level dicts ``top`` that
    it spreads), or None where any key cannot be known."""
    if isinstance(node, ast.Name) and node.id in top and node.id not in seen:
        return _dict_keys(top[node.id], top, (*seen, node.id))
    if isinstance(node, ast.Dict):
        keys: set[str] = set()
        for key, value in zip(node.keys, node.values):
            if key is None:  # {**other}
                spread = _dict_keys(value, top, seen)
                if spread is None:
                    return None
                keys |= spread
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(key.value)
            else:
                return None
        return keys
    if isinstance(node, ast.Call) and _dotted(node.func) == ("dict", []) and not node.args:
        keys = [k.arg and ast.Constant(k.arg) for k in node.keywords]  # dict(k=v, **other)
        return _dict_keys(ast.Dict(keys, [k.value for k in node.keywords]), top, seen)
    return None


def _top_dicts(tree: ast.Module) -> dict[str, ast.AST]:
    """The names assigned once at the top of the module, with their values, left out where
    the file changes them in place (``NAME[k] = ...``, ``NAME.update(...)``, ...)."""
    values: dict[str, list] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name):
            values.setdefault(target.id, []).append(value)
    changed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            changed.add(getattr(node.value, "id", None))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in ("update", "pop", "popitem", "setdefault", "clear", "__setitem__"):
                changed.add(node.value.id)
    return {name: v[0] for name, v in values.items() if len(v) == 1 and name not in changed}


def _resolve(dotted: str):
    """The object that ``dotted`` names: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module of {dotted}")


def _bind(signature: inspect.Signature, call: ast.Call, top: dict[str, ast.AST]) -> str:
    """Why ``call``'s arguments do not bind to ``signature`` ("" when they do, or when what
    would tell cannot be known)."""
    params = signature.parameters.values()
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    by_name = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    keywords, known = [], True
    for keyword in call.keywords:
        if keyword.arg is not None:
            keywords.append(keyword.arg)
            continue
        keys = _dict_keys(keyword.value, top)
        if keys is None:
            known = False
        else:
            keywords += sorted(keys)
    if any(isinstance(a, ast.Starred) for a in call.args):  # only the keywords' names are known
        unknown = [k for k in keywords if k not in by_name]
        if unknown and not takes_any:
            return f"got an unexpected keyword argument {unknown[0]!r}"
        return ""
    duplicated = {k for k in keywords if keywords.count(k) > 1}
    if duplicated:
        return f"got multiple values for keyword argument {sorted(duplicated)[0]!r}"
    bind = signature.bind if known else signature.bind_partial
    try:
        bind(*[None] * len(call.args), **dict.fromkeys(keywords))
    except TypeError as error:
        return str(error)
    return ""


def _in(package: str, dotted: str) -> bool:
    return dotted == package or dotted.startswith(f"{package}.")


def _of_package(obj, package: str) -> bool:
    is_code = inspect.isroutine(obj) or inspect.isclass(obj)
    return is_code and _in(package, getattr(obj, "__module__", None) or "")


def _dotted(node: ast.AST) -> tuple[str, list[str]] | None:
    """``a.b.c`` as ("a", ["b", "c"]); None for anything but names and attributes."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.insert(0, node.attr)
        node = node.value
    return (node.id, attrs) if isinstance(node, ast.Name) else None


def _expects_an_error(item: ast.withitem) -> bool:
    """Whether a ``with`` block expects its code to raise (``pytest.raises(...)``)."""
    dotted = _dotted(item.context_expr.func) if isinstance(item.context_expr, ast.Call) else None
    return dotted is not None and [dotted[0], *dotted[1]][-1] == "raises"


def _names_of(tree: ast.Module, module: str, package: str) -> set[str]:
    """The names in ``tree`` that may refer to the package: those imported from it, and in
    its own modules the names defined at their top."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            source = getattr(node, "module", None) or ""
            for alias in node.names:
                if _in(package, source) or _in(package, alias.name):
                    names.add((alias.asname or alias.name).split(".")[0])
    if module:
        kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        names |= {node.name for node in tree.body if isinstance(node, kinds)}
    return names


def unbound_calls(
    source: str, path: str, module: str = "", package: str = PACKAGE
) -> list[Unbound]:
    """Every call in ``source`` (the file at ``path``; ``module``: its dotted name where it is
    a module of the package) of the ``package``'s functions and classes that does not bind."""
    tree = ast.parse(source, path)
    candidates = _names_of(tree, module, package)
    if not candidates:
        return []
    bindings: dict[int, dict] = {}  # of each scope, by id, found when first asked for
    top: list[dict] = []  # the top-level dicts, found when first asked for
    found: list[Unbound] = []

    def walk(node: ast.AST, scopes: list[ast.AST]) -> None:
        if isinstance(node, SCOPES + COMPREHENSIONS) and node is not scopes[-1]:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                for child in _outside(node):
                    walk(child, scopes)
                body = node.body
            else:
                body = list(ast.iter_child_nodes(node))
            for child in body:
                walk(child, [*scopes, node])
            return
        if isinstance(node, ast.Call):
            check(node, scopes)
        if isinstance(node, ast.With) and any(map(_expects_an_error, node.items)):
            return  # a call that must fail, on purpose
        for child in ast.iter_child_nodes(node):
            walk(child, scopes)

    def target_of(name: str, scopes: list[ast.AST]) -> object:
        for scope in reversed(scopes):
            # a class's names are not seen from the functions inside it
            if isinstance(scope, ast.ClassDef) and scope is not scopes[-1]:
                continue
            if id(scope) not in bindings:
                bindings[id(scope)] = _bindings(scope, module)
            if name in bindings[id(scope)]:
                return bindings[id(scope)][name]
        return UNKNOWN

    def check(call: ast.Call, scopes: list[ast.AST]) -> None:
        dotted = _dotted(call.func)
        if dotted is None or dotted[0] not in candidates:
            return
        target = target_of(dotted[0], scopes)
        if target is UNKNOWN or not _in(package, target):
            return
        callee = ".".join([target, *dotted[1]])
        try:
            obj = _resolve(callee)
        except (ImportError, AttributeError) as error:
            found.append(Unbound(path, call.lineno, callee, f"does not exist: {error}"))
            return
        if not _of_package(obj, package):
            return
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            return
        if not top and any(keyword.arg is None for keyword in call.keywords):
            top.append(_top_dicts(tree))
        error = _bind(signature, call, top[0] if top else {})
        if error:
            found.append(Unbound(path, call.lineno, callee, error))

    walk(tree, [tree])
    return found


def unbound_in(repo: Path) -> list[Unbound]:
    """Every call of the repository's tests, scripts and package that does not bind."""
    workflow = repo / "workflow"
    modules = {path: "" for path in [*(repo / "tests").rglob("*.py")]}
    modules |= {path: "" for path in (workflow / "scripts").glob("*.py")}
    for path in (workflow / PACKAGE).rglob("*.py"):
        dotted = ".".join(path.relative_to(workflow).with_suffix("").parts)
        modules[path] = dotted.removesuffix(".__init__")
    found = []
    for path, module in sorted(modules.items()):
        found += unbound_calls(path.read_text(), str(path.relative_to(repo)), module)
    return found
