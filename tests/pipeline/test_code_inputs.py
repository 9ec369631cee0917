from d2lrepro.pipeline import code_inputs


def names(files):
    return {f.split("workflow/d2lrepro/", 1)[1] for f in files}


def test_closure_follows_dotted_nested_and_late_imports(tmp_path, repo):
    script = tmp_path / "script.py"
    script.write_text(
        "import json\nfrom d2lrepro.core import logs\n"
        "def late():\n    import d2lrepro.pipeline.claims\n"
    )
    # claims imports devices inside a function; every package's __init__ runs on the way, and
    # the top one imports the allocator
    assert names(code_inputs.closure(script, repo)) == {
        "__init__.py",
        "core/__init__.py",
        "core/allocator.py",
        "core/logs.py",
        "core/devices.py",
        "core/environment.py",
        "core/machines.py",
        "core/paths.py",
        "core/results.py",
        "pipeline/__init__.py",
        "pipeline/checks.py",
        "pipeline/claims.py",
        "pipeline/scaling.py",
    }


def test_from_a_module_import_a_name(tmp_path, repo):
    script = tmp_path / "script.py"
    script.write_text("from d2lrepro.core.results import metric\n")
    assert "core/results.py" in names(code_inputs.closure(script, repo))
    assert not any(n.startswith("optimization") for n in names(code_inputs.closure(script, repo)))


def test_relative_imports_resolve_against_the_importing_package(tmp_path):
    package = tmp_path / "d2lrepro"
    (package / "sub").mkdir(parents=True)
    for f in ("__init__.py", "sub/__init__.py", "sub/a.py", "sub/b.py", "c.py"):
        (package / f).write_text("")
    (package / "sub" / "a.py").write_text("from . import b\nfrom ..c import x\n")
    found = code_inputs.imported_modules(package / "sub" / "a.py", package)
    assert {p.relative_to(package).as_posix() for p in found} == {
        "__init__.py",
        "sub/__init__.py",
        "sub/b.py",
        "c.py",
    }


def test_a_script_importing_nothing_of_the_package_needs_no_module(tmp_path, repo):
    script = tmp_path / "script.py"
    script.write_text("import os\n")
    assert code_inputs.closure(script, repo) == []


def test_every_rule_script_names_only_files_that_exist(repo):
    for script in (repo / "workflow" / "scripts").glob("*.py"):
        for f in code_inputs.closure(script, repo):
            assert (repo / f).is_file(), (script.name, f)
