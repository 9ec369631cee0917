"""Where the workflow's files live (d2lrepro.core.paths)."""

from pathlib import Path

from d2lrepro.core import paths


def test_a_run_writes_under_results_relative_to_its_working_directory():
    assert paths.experiment("optimization", "airfoil") == Path("results/optimization/airfoil")
    assert paths.figure("lr_schedules", "cosine") == Path("results/figures/lr_schedules/cosine.png")
    assert paths.claims_table("async") == Path("results/claims/async.html")
    written = [paths.ENVIRONMENT, paths.CLAIMS, paths.REPORT, paths.CHECKPOINTS, paths.COMPARE]
    assert all(not p.is_absolute() and p.parts[0] == "results" for p in written)


def test_the_shipped_files_are_found_from_the_package_wherever_it_runs(repo):
    assert paths.REPO == repo
    shipped = [
        paths.LEDGER,
        paths.CONFIG_SCHEMA,
        paths.CLAIMS_SCHEMA,
        paths.BOOK_CURVES,
        paths.REPORT_TEMPLATE,
        paths.SECTION_TEMPLATE,
        paths.COMPARE_TEMPLATE,
        paths.SECTION_CAPTION,
    ]
    assert all(p.is_absolute() and p.is_file() for p in shipped)
    assert paths.SCRIPTS.is_dir() and paths.CAPTIONS.is_dir()


def test_a_section_s_caption_is_its_own_file_else_the_generic_one(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CAPTIONS", tmp_path)
    (tmp_path / "airfoil.rst").write_text("The airfoil figures.\n")
    assert paths.caption("airfoil") == tmp_path / "airfoil.rst"
    assert paths.caption("async") == paths.SECTION_CAPTION
