"""Every call of the package's functions and classes in the tests, the scripts and the package
binds to its signature (tests/bindings.py): checked without running anything, so also the calls
of CUDA paths that run only where there is a GPU."""

import textwrap

import bindings

PACKAGE = {
    "__init__.py": "",
    "timers.py": '''
        def copy_overlap(size=4000, n=50, seed=0, max_run_time=10.0):
            """A timer that takes a time limit and no least time."""

        def spread(values):
            """A function of one argument."""

        def flexible(**options):
            """A function that takes any keyword."""

        class Clock:
            def __init__(self, *devices, label=""):
                pass

            @classmethod
            def of(cls, device):
                pass
    ''',
}

# Calls of synthpkg, and what the checker must say of each one that does not bind (by line).
CALLER = """
from synthpkg import timers
from synthpkg.timers import spread as middle
import synthpkg.timers as t

LIMIT = {"max_run_time": 0.2}
FAST = {**LIMIT, "min_run_time": 0.01}
SIZES = dict(size=64, n=2)
CHANGED = {"size": 1}
CHANGED["min_run_time"] = 1

timers.copy_overlap(size=64, **LIMIT)
timers.copy_overlap(**SIZES, **FAST)
t.copy_overlap(64, 2, 0, 1.0, 5)
middle()
middle(*rows)
timers.copy_overlap(*rows, min_run_time=1)
timers.copy_overlap(**CHANGED)
timers.copy_overlap(64, **options)
timers.copy_overlap(64, size=2, **options)
timers.Clock("cuda:0", "cuda:1", label="x")
timers.Clock.of("cuda:0", "cuda:1")
timers.flexible(anything=1)
timers.gone()


def shadowed(timers):
    timers.copy_overlap(nonsense=1)  # the argument, not the module


def imports_late():
    from synthpkg import timers as late

    return [late.spread(values=v, extra=2) for v in (1, 2)]


def fails_on_purpose():
    with pytest.raises(TypeError):
        middle(1, 2)
"""
EXPECTED = {
    13: ("copy_overlap", "got an unexpected keyword argument 'min_run_time'"),
    14: ("copy_overlap", "too many positional arguments"),
    15: ("spread", "missing a required argument: 'values'"),
    17: ("copy_overlap", "got an unexpected keyword argument 'min_run_time'"),
    20: ("copy_overlap", "multiple values for argument 'size'"),
    22: ("of", "too many positional arguments"),
    24: ("gone", "does not exist"),
    34: ("spread", "got an unexpected keyword argument 'extra'"),
}


def test_every_call_of_the_package_binds(repo):
    unbound = bindings.unbound_in(repo)
    assert not unbound, "calls that do not bind:\n" + "\n".join(map(str, unbound))


def test_the_checker_names_each_call_that_does_not_bind(tmp_path, monkeypatch):
    for name, text in PACKAGE.items():
        (tmp_path / "synthpkg").mkdir(exist_ok=True)
        (tmp_path / "synthpkg" / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(tmp_path)
    found = bindings.unbound_calls(CALLER, "caller.py", package="synthpkg")
    assert {u.line: u.callee.rsplit(".", 1)[-1] for u in found} == {
        line: callee for line, (callee, _) in EXPECTED.items()
    }
    for unbound in found:
        assert EXPECTED[unbound.line][1] in unbound.error, unbound
    # In the package's own modules, its top-level functions are called by their bare names.
    own = "def spread(values):\n    pass\n\n\nspread(1, 2)\n"
    found = bindings.unbound_calls(own, "timers.py", "synthpkg.timers", package="synthpkg")
    assert [(u.line, u.callee) for u in found] == [(5, "synthpkg.timers.spread")]
