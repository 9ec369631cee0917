import copy

import pytest
import yaml

from conftest import shipped_claims
from d2lrepro.pipeline import settings


@pytest.fixture
def config(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())


def test_shipped_config_is_valid(config):
    resolved = settings.resolve(config, cuda_available=False)
    assert resolved.preset == "cpu"
    assert "presets" not in resolved.values


@pytest.mark.parametrize("cuda, preset", [(True, "book"), (False, "cpu")])
def test_auto_picks_book_only_with_cuda(config, cuda, preset):
    config["preset"] = "auto"
    assert settings.resolve(config, cuda_available=cuda).preset == preset


def test_book_preset_has_no_deviations(config):
    config["preset"] = "book"
    assert settings.resolve(config).deviations == []


def test_preset_overlay_is_applied_and_reported(config):
    config["preset"] = "smoke"
    config["presets"]["smoke"] = {"airfoil": {"examples": 100}}
    resolved = settings.resolve(config)
    assert resolved.values["airfoil"]["examples"] == 100
    assert settings.Deviation("airfoil.examples", 1500, 100) in resolved.deviations


def test_an_override_of_the_books_settings_is_a_deviation(config, tmp_path, monkeypatch):
    """What --config or --configfile change of config.yaml's sections (Snakemake merged them
    into the config) is listed as a preset's change is; how the run goes is no deviation."""
    given = settings.merge(
        config,
        {
            "preset": "book",
            "lr_schedules": {"seeds": [0]},
            "seed": 3,
            "data_mirror": "/elsewhere",
            "jobs_per_gpu": 1,
            "job_server": False,
            "presets": {"book": {"lr_schedules": {"epochs": 10}}},
            "data_parallel": {
                "runs": {
                    "lenet.4": {
                        "model": "lenet",
                        "devices": 4,
                        "epochs": 10,
                        "batch_size": 1024,
                        "lr": 0.8,
                    }
                }
            },
        },
    )
    monkeypatch.chdir(tmp_path)  # the results tree (its recorded preset) of a new run
    resolved = settings.for_run(given)
    assert [(d.key, d.book, d.value) for d in resolved.deviations] == [
        ("seed", 0, 3),
        ("lr_schedules.seeds", [0, 1, 2], [0]),
        ("lr_schedules.epochs", 30, 10),
        (
            "data_parallel.runs.lenet.4",
            settings.NOT_IN_BOOK,
            resolved.values["data_parallel"]["runs"]["lenet.4"],
        ),
    ]
    assert resolved.values["lr_schedules"]["seeds"] == [0]
    assert resolved.overridden == {d.key for d in resolved.deviations}
    # without the project's file to compare with, the given config is the book's: only its
    # preset's block changes it
    assert settings.resolve(given).deviations == [settings.Deviation("lr_schedules.epochs", 30, 10)]


def test_a_value_added_to_an_open_map_is_not_in_the_book(config):
    """A leaf the book's config lacks is an addition (a sweep's setting), not an unset one,
    but a run's unset subset is all the data."""
    given = settings.merge(config, {"airfoil": {"gap_at": {"adam.concise": 1.0}}})
    (added,) = settings.resolve({**given, "preset": "book"}, book=config).deviations
    assert added == settings.Deviation("airfoil.gap_at.adam.concise", settings.NOT_IN_BOOK, 1.0)
    found = settings.deviations({"run": {"epochs": 10}}, {"run": {"epochs": 10, "train_subset": 9}})
    assert found == [settings.Deviation("run.train_subset", None, 9)]


def test_a_presets_own_changes_are_not_said_to_be_given(config, tmp_path, monkeypatch):
    """With the cpu preset and a --config beside it, only what the --config changed of the
    preset's run is overridden; a run option nested in a section is no deviation either."""
    given = settings.merge(config, {"preset": "cpu", "seed": 3, "data_parallel": {"timeout": 60}})
    monkeypatch.chdir(tmp_path)
    resolved = settings.for_run(given)
    cpu = settings.resolve({**config, "preset": "cpu"})
    assert resolved.deviations == [settings.Deviation("seed", 0, 3), *cpu.deviations]
    assert resolved.overridden == {"seed"}
    assert "data_parallel.timeout" in settings.run_options(settings.load_schema())


def test_no_claim_depends_on_a_run_option():
    """A change of a run option is no deviation, so a claim that depended on one would be
    judged as if at the book's settings whatever it was."""
    options = settings.run_options(settings.load_schema())
    assert options >= {"preset", "data_mirror", "job_server", "data_parallel.timeout"}
    for claim in shipped_claims().values():
        for key in claim.get("depends_on", []):
            assert not any(f"{key}.".startswith(f"{o}.") for o in options), (claim["id"], key)


def test_defaults_are_filled(config):
    del config["seed"]
    assert settings.resolve(config, cuda_available=False).values["seed"] == 0


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda c: c.update(prest="smoke"), "'prest' was unexpected"),
        (lambda c: c.update(preset="fast"), "config key 'preset'"),
        (lambda c: c["intro"].update(grid_step="small"), "config key 'intro.grid_step'"),
        (lambda c: c["intro"].update(grid_step=-1), "config key 'intro.grid_step'"),
        (lambda c: c["airfoil"].update(examples=5000), "config key 'airfoil.examples'"),
        (lambda c: c["presets"].update(turbo={}), "config key 'presets'"),
        # the book's code is what the claims judge first: a preset may leave out only intended
        (lambda c: c["lr_schedules"].update(semantics=["intended"]), "lr_schedules.semantics"),
        # and the book's batch of 1 is what the hybridize claims time
        (lambda c: c["hybridize"].update(batch_sizes=[64, 1024]), "hybridize.batch_sizes"),
    ],
)
def test_bad_config_names_the_key(config, edit, key):
    edit(config)
    with pytest.raises(settings.ConfigError, match=key.replace("(", r"\(")):
        settings.resolve(config, cuda_available=False)


def test_bad_value_inside_a_preset_is_caught(config):
    config["preset"] = "smoke"
    config["presets"]["smoke"] = {"airfoil": {"exampels": 100}}
    with pytest.raises(
        settings.ConfigError, match="config key 'airfoil'.*'exampels' was unexpected"
    ):
        settings.resolve(config)


def test_merge_does_not_touch_its_inputs():
    base = {"a": {"b": 1, "c": 2}}
    before = copy.deepcopy(base)
    assert settings.merge(base, {"a": {"b": 3}}) == {"a": {"b": 3, "c": 2}}
    assert base == before


def test_null_in_place_of_a_run_leaves_it_out_and_says_so(config):
    """null leaves out an entry that holds a dict (a run); in place of a value it is that
    value (a subset of null is all the data)."""
    config["presets"]["smoke"] = {
        "data_parallel": {"runs": {"resnet18_b256.2": None}},
        "lr_schedules": {"train_subset": None},
    }
    resolved = settings.resolve({**config, "preset": "smoke"})
    assert "resnet18_b256.2" not in resolved.values["data_parallel"]["runs"]
    assert "resnet18.2" in resolved.values["data_parallel"]["runs"]
    (left_out,) = resolved.deviations
    assert (left_out.key, left_out.value) == ("data_parallel.runs.resnet18_b256.2", "left out")
    assert left_out.book["batch_size"] == 256


@pytest.mark.parametrize("section, entry", [("autopar", "cpu"), ("airfoil", "adam_eps")])
def test_null_cannot_leave_out_what_the_code_always_reads(config, section, entry):
    config["presets"]["smoke"] = {section: {entry: None}}
    with pytest.raises(settings.ConfigError, match=f"config key '{section}': '{entry}' is a"):
        settings.resolve({**config, "preset": "smoke"})


def test_a_results_tree_keeps_the_preset_it_was_made_with(tmp_path, config):
    record = tmp_path / "results" / "preset.txt"
    first = settings.resolve(config, cuda_available=True, record=record)
    assert first.preset == "book" and not record.exists()  # a parse alone records nothing
    settings.record_preset(first.preset, record)
    settings.record_preset("cpu", record)  # the first record stays
    assert record.read_text() == "book\n"
    # a later parse on a host without CUDA (--report, -n, -R) keeps what the run used
    assert settings.resolve(config, cuda_available=False, record=record).preset == "book"
    assert settings.resolve(config | {"preset": "book"}, record=record).preset == "book"
    with pytest.raises(settings.ConfigError, match="made with preset book .*preset=smoke"):
        settings.resolve(config | {"preset": "smoke"}, record=record)
    record.write_text("nonsense\n")
    with pytest.raises(settings.ConfigError, match="names no preset"):
        settings.resolve(config, record=record)


@pytest.fixture
def gpu_machine(monkeypatch, tmp_path):
    """This machine as one with an NVIDIA driver and ``torch_cuda`` the torch installed (its
    version file says so), on which importing torch fails: ``gpu_machine(torch_cuda)``."""
    import importlib.util
    import sys
    from types import SimpleNamespace

    def fake(torch_cuda):
        version = tmp_path / "torch" / "version.py"
        version.parent.mkdir(exist_ok=True)
        version.write_text(f"from typing import Optional\ncuda: Optional[str] = {torch_cuda!r}\n")
        spec = SimpleNamespace(origin=str(version.with_name("__init__.py")))
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
        monkeypatch.setattr(settings.shutil, "which", lambda name: f"/usr/bin/{name}")
        monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError

    return fake


def test_the_gpus_of_a_machine_are_counted_without_importing_torch(gpu_machine, monkeypatch):
    gpu_machine("13.0")
    seen = []
    monkeypatch.setattr(settings.gpu_locks, "nvml_gpu_count", lambda v: seen.append(v) or 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert settings.local_gpus() == 2
    assert seen == ["0,1"]


def test_a_torch_without_cuda_counts_no_gpu(gpu_machine, monkeypatch):
    gpu_machine(None)
    monkeypatch.setattr(settings.gpu_locks, "nvml_gpu_count", lambda v: 2)
    assert settings.local_gpus() == 0


def test_torch_counts_what_nvml_cannot_tell(gpu_machine, monkeypatch):
    gpu_machine("13.0")
    monkeypatch.setattr(settings.gpu_locks, "nvml_gpu_count", lambda v: None)
    with pytest.raises(ImportError):  # it went to torch, which this test made unimportable
        settings.local_gpus()


def test_the_installed_torch_is_read_as_it_says(monkeypatch, tmp_path):
    import importlib.util
    from types import SimpleNamespace

    import torch

    assert settings.torch_has_cuda() == (torch.version.cuda is not None)
    # installed without its sources: torch itself says
    spec = SimpleNamespace(origin=str(tmp_path / "torch" / "__init__.pyc"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert settings.torch_has_cuda()
    monkeypatch.setattr(torch.version, "cuda", None)
    assert not settings.torch_has_cuda()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no torch
    assert not settings.torch_has_cuda()


def test_auto_asks_torch_whether_cuda_works_only_where_there_are_gpus(gpu_machine, monkeypatch):
    gpu_machine("13.0")
    monkeypatch.setattr(settings.gpu_locks, "nvml_gpu_count", lambda v: 0)
    assert not settings._cuda_available()  # torch, unimportable here, was not asked
    monkeypatch.setattr(settings.gpu_locks, "nvml_gpu_count", lambda v: 1)
    with pytest.raises(ImportError):
        settings._cuda_available()
