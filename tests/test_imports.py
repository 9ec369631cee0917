from d2lrepro import imports


def test_closure_follows_absolute_relative_and_nested_imports(tmp_path, repo):
    script = tmp_path / "script.py"
    script.write_text(
        "import json\nfrom d2lrepro import logs\ndef late():\n    import d2lrepro.claims\n"
    )
    names = {p.rsplit("/", 1)[1] for p in imports.closure(script, repo)}
    # claims imports devices inside a function; __init__ (and its allocator) runs with any module
    assert names == {"__init__.py", "allocator.py", "logs.py", "claims.py", "devices.py"}


def test_relative_imports_of_names_and_modules(repo):
    found = imports.imported_modules(imports.PACKAGE_DIR / "multigpu_run.py")
    assert {"data", "devices", "multigpu_concise", "multigpu_scratch", "results", "timing"} <= found
    assert "torch" not in found and "multigpu_run" not in found


def test_a_script_importing_nothing_of_the_package_needs_no_module(tmp_path, repo):
    script = tmp_path / "script.py"
    script.write_text("import os\n")
    assert imports.closure(script, repo) == []
