"""Where the workflow's files live (d2lrepro.core.paths)."""

import re
from pathlib import Path

import pytest

from conftest import REPO
from d2lrepro.core import paths


def test_a_run_writes_under_results_relative_to_its_working_directory():
    assert paths.experiment("optimization", "airfoil") == Path("results/optimization/airfoil")
    assert paths.figure("lr_schedules", "cosine") == Path("results/figures/lr_schedules/cosine.png")
    assert paths.claims_table("async") == Path("results/claims/async.html")
    written = [paths.ENVIRONMENT, paths.CLAIMS, paths.REPORT, paths.CHECKPOINTS, paths.COMPARE]
    assert all(not p.is_absolute() and p.parts[0] == "results" for p in written)


def test_the_shipped_files_are_found_from_the_package_wherever_it_runs():
    assert paths.REPO == REPO
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


def test_a_run_file_is_named_after_its_run_and_seed_and_read_back():
    assert paths.run_file("lenet.1", 0) == "lenet.1.seed0.csv"
    assert paths.run_file("lenet.1", 2, "topk.csv") == "lenet.1.seed2.topk.csv"
    assert paths.run_file("{run}", "{seed}", "log") == "{run}.seed{seed}.log"
    for run, seed, kind in [
        ("lenet.2", 0, "csv"),
        ("resnet18_b256.2", 12, "topk.csv"),
        ("cosine.as_written", 3, "tsv"),
    ]:
        path = Path("results/x") / paths.run_file(run, seed, kind)
        assert paths.run_of(path, kind) == (run, seed)
        assert paths.run_of(str(path), kind) == (run, seed)


def test_a_file_that_is_not_a_run_s_is_refused_by_name():
    for name in [
        "metrics.csv",
        "lenet.2.csv",
        "lenet.2.seed.csv",
        "lenet.2.seedx.csv",
        ".seed0.csv",
        "lenet.2.seed0.topk.csv",
        "lenet.2.seed0.machines.json",
    ]:
        with pytest.raises(ValueError, match=rf"{re.escape(name)}: not a run's csv file"):
            paths.run_of(Path("results") / name)
    with pytest.raises(ValueError, match="not a run's topk.csv file"):
        paths.run_of("lenet.2.seed0.csv", "topk.csv")
