import pytest

from d2lrepro.pipeline import claims, code_inputs


def names(files):
    return {f.split("workflow/d2lrepro/", 1)[1] for f in files}


def test_closure_follows_dotted_nested_and_late_imports(tmp_path, repo):
    script = tmp_path / "script.py"
    script.write_text(
        "import json\nfrom d2lrepro.core import logs\n"
        "def late():\n    import d2lrepro.pipeline.claims\n"
    )
    # every package's __init__ runs on the way, and the top one imports the allocator;
    # machines imports environment only inside a function that claims never runs, and claims
    # reads why a device is missing from shortfall, not from devices (torch); settings counts
    # the machine's GPUs through gpu_locks, free of torch too
    assert names(code_inputs.closure(script, repo)) == {
        "__init__.py",
        "core/__init__.py",
        "core/allocator.py",
        "core/gpu_locks.py",
        "core/logs.py",
        "core/provenance.py",
        "core/paths.py",
        "core/results.py",
        "core/shortfall.py",
        "pipeline/__init__.py",
        "pipeline/checks.py",
        "pipeline/claims.py",
        "pipeline/evidence.py",
        "pipeline/ledger.py",
        "pipeline/scaling.py",
        "pipeline/settings.py",
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


def package(tmp_path, files: dict[str, str]):
    """A package d2lrepro under ``tmp_path``/workflow with ``files`` (path: source)."""
    root = tmp_path / "workflow" / "d2lrepro"
    root.mkdir(parents=True)
    for name, source in {"__init__.py": "", **files}.items():
        (root / name).write_text(source)
    return tmp_path


def test_a_late_import_counts_only_where_its_function_runs(tmp_path):
    """An experiment imports its plotting inside its summary: its training job does not
    depend on the plotting, its summary job does, and so does anything that runs the summary
    by a detour (a call within the module, a table of functions, the module passed on)."""
    root = package(
        tmp_path,
        {
            "exp.py": "from d2lrepro import train\n"
            "def run():\n    return train.go()\n"
            "def summarize():\n    from d2lrepro import plots\n    return plots.draw()\n"
            "def both():\n    run()\n    return summarize()\n"
            "STEPS = {'summary': summarize}\n",
            "train.py": "def go():\n    return 1\n",
            "plots.py": "def draw():\n    return 2\n",
        },
    )

    def closure(source):
        script = tmp_path / "script.py"
        script.write_text(source)
        return {f.removeprefix("workflow/d2lrepro/") for f in code_inputs.closure(script, root)}

    assert closure("from d2lrepro import train\ntrain.go()\n") == {"__init__.py", "train.py"}
    # exp's top level names summarize in a table: whoever imports exp may run it.
    assert "plots.py" in closure("from d2lrepro import exp\nexp.run()\n")
    table_free = (
        (root / "workflow/d2lrepro/exp.py")
        .read_text()
        .replace("STEPS = {'summary': summarize}\n", "")
    )
    (root / "workflow/d2lrepro/exp.py").write_text(table_free)
    assert closure("from d2lrepro import exp\nexp.run()\n") == {
        "__init__.py",
        "exp.py",
        "train.py",
    }
    assert "plots.py" in closure("from d2lrepro import exp\nexp.summarize()\n")
    assert "plots.py" in closure("from d2lrepro import exp\nexp.both()\n")
    assert "plots.py" in closure("from d2lrepro.exp import summarize\nsummarize()\n")
    assert "plots.py" in closure("from d2lrepro import exp\nrun_all(exp)\n")
    assert "plots.py" in closure("import d2lrepro.exp\nd2lrepro.exp.run()\n")


def test_a_training_job_does_not_depend_on_its_experiment_s_figures(repo):
    def closure(script):
        path = repo / "workflow" / "scripts" / f"{script}.py"
        return names(code_inputs.closure(path, repo))

    for training in ("data_parallel_run", "cost_model", "parameter_server", "single_process"):
        assert "multidevice/parts/figures.py" not in closure(training), training
        assert "core/plotting.py" not in closure(training), training
    assert "multidevice/parts/figures.py" in closure("data_parallel_summary")
    assert "multidevice/data_parallel.py" in closure("data_parallel_summary")
    assert "multidevice/cost_model.py" not in closure("data_parallel_run")


def test_a_main_block_runs_only_where_the_module_is_started_as_a_program(tmp_path):
    """An experiment that is its own workers' program: its training job, which names its
    ``main`` to start them, runs what the workers import; its summary does not."""
    root = package(
        tmp_path,
        {
            "exp.py": "import sys\n"
            "def launch():\n"
            "    from d2lrepro import launcher\n"
            "    launcher.start(sys.modules[main.__module__])\n"
            "def summarize():\n    return 0\n"
            "def main():\n    from d2lrepro import worker\n    worker.join()\n"
            'if __name__ == "__main__":\n    main()\n',
            "launcher.py": "def start(module):\n    return module\n",
            "worker.py": "def join():\n    return 1\n",
        },
    )

    def closure(source):
        script = tmp_path / "script.py"
        script.write_text(source)
        return {f.removeprefix("workflow/d2lrepro/") for f in code_inputs.closure(script, root)}

    assert closure("from d2lrepro import exp\nexp.summarize()\n") == {"__init__.py", "exp.py"}
    assert "worker.py" in closure("from d2lrepro import exp\nexp.launch()\n")
    assert "worker.py" in closure("from d2lrepro import exp\nrun_all(exp)\n")


def test_an_experiment_s_workers_are_inputs_of_its_job_not_of_its_summary(repo):
    def closure(script):
        path = repo / "workflow" / "scripts" / f"{script}.py"
        return names(code_inputs.closure(path, repo))

    for job in ("cost_model", "parameter_server"):
        assert "multidevice/parts/process_group.py" in closure(job), job
        assert "multidevice/parts/process_group.py" not in closure(f"{job}_summary"), job
    # Joining a run is not training: the training worker is no input of the parameter servers.
    assert "multidevice/parts/worker.py" not in closure("parameter_server")
    assert "multidevice/parameter_server.py" not in closure("cost_model")
    assert "multidevice/cost_model.py" not in closure("parameter_server")


def test_the_modules_the_ledger_names_are_inputs_of_the_comparison(repo):
    """compared_curves name curve-id mappings by dotted name, which no import statement shows:
    editing one must rerun the comparison."""
    named = code_inputs.ledger_modules(claims.load(repo / "workflow" / "claims.yaml"))
    files = code_inputs.module_files(named, repo)
    assert "workflow/d2lrepro/multidevice/parts/run_results.py" in files
    assert "workflow/d2lrepro/optimization/lr_schedules.py" in files
    assert all((repo / f).is_file() for f in files)
    with pytest.raises(ValueError, match="no module of d2lrepro is named d2lrepro.nowhere"):
        code_inputs.module_files(["d2lrepro.nowhere"], repo)
