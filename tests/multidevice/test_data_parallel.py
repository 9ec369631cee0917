import pandas as pd
import pytest
import torch
import yaml

from conftest import REPO, cpus, machine_record, shipped_claims, training_history
from d2lrepro.core import reference
from d2lrepro.multidevice import cost_model, data_parallel, single_process
from d2lrepro.pipeline import claims, settings
from d2lrepro.pipeline.claims import NOT_APPLICABLE


def test_allreduce_sums_into_every_tensor():
    data = [torch.ones(1, 2), torch.ones(1, 2) * 2]
    single_process.allreduce(data)
    for tensor in data:
        assert torch.equal(tensor, torch.tensor([[3.0, 3.0]]))

    data = [torch.randn(3, 4) for _ in range(3)]
    total = sum(t.clone() for t in data)
    single_process.allreduce(data)
    for tensor in data:
        assert torch.allclose(tensor, total)


def test_split_batch():
    X = torch.arange(20).reshape(4, 5)
    xs, ys = single_process.split_batch(X, torch.arange(4), cpus(2))
    assert [x.tolist() for x in xs] == [X[:2].tolist(), X[2:].tolist()]
    assert [y.tolist() for y in ys] == [[0, 1], [2, 3]]

    xs, ys = single_process.split_batch(torch.zeros(7, 3), torch.arange(7), cpus(3))
    assert [len(x) for x in xs] == [3, 2, 2]
    assert torch.equal(torch.cat(ys), torch.arange(7))
    xs, _ = single_process.split_batch(torch.zeros(2, 3), torch.zeros(2), cpus(4))
    assert [len(x) for x in xs] == [1, 1, 0, 0]  # always n chunks, unlike torch.chunk


def test_split_batch_rejects_mismatched_rows():
    try:
        single_process.split_batch(torch.zeros(4, 2), torch.zeros(3), cpus(2))
    except ValueError as error:
        assert "4 rows" in str(error)
    else:
        raise AssertionError("expected ValueError")


def test_every_step_of_the_cost_model_is_built():
    for name in cost_model.STEPS:
        net, step, communicate = cost_model.setup(name, 0, 0.1, torch.device("cpu"))
        x, y = torch.rand(2, 1, 28, 28), torch.tensor([0, 1])
        logits, _ = step(x, y, 2)
        assert logits.shape == (2, 10)
    with pytest.raises(ValueError, match="no cost-model step"):
        cost_model.setup("alexnet", 0, 0.1, torch.device("cpu"))


BOOK = reference.load()
RECORDS = {"m1": machine_record("node1", 1), "m2": machine_record("node2", 2)}


def test_the_summaries_compare_every_pair_and_draw_every_figure(tmp_path, footers, notes):
    """Every row names the machines of the jobs whose data it comes from (a speed-up, both
    runs'), and every figure's footer names those of the data it draws: the 1-device runs ran
    on a job with one GPU, the rest on one with two. The book's one-process runs have their
    own summary, and are drawn beside the data-parallel ones."""

    def write(name, on, **settings):
        h = training_history([2.3, 1.0, 0.8])
        h = h.assign(world_size=1, batch_size=256, lr=0.1, train_acc=0.9, **settings, machine=on)
        h.drop(columns="seed").to_csv(tmp_path / f"{name}.csv", index=False)
        return tmp_path / f"{name}.csv"

    runs = {
        ("lenet.1", 0): write("lenet.1.seed0", "m1", model="lenet"),
        ("lenet.2", 0): write("lenet.2.seed0", "m2", model="lenet", steady_samples_per_s=200.0),
        ("resnet18_momentum.1", 0): write("resnet18_momentum.1.seed0", "m1", model="resnet18"),
        ("resnet18_momentum.2", 0): write(
            "resnet18_momentum.2.seed0", "m2", model="resnet18", seconds=1.5, test_acc=0.7
        ),
    }
    (tmp_path / "single_process").mkdir()
    book_code = [write(f"single_process/lenet.{n}", "m2", model="lenet") for n in (1, 2)]
    topk = tmp_path / "resnet18_momentum.1.seed0.topk.csv"
    pd.DataFrame(
        {"epoch": 1, "batch": [0, 50], "train_loss": [2.3, 1.1], "top1": [0.1, 0.6], "top5": 0.9}
    ).assign(machine="m1").to_csv(topk, index=False)
    names = ["mgpu_test_acc", "mgpu_epochs", "mgpuc_test_acc", "mgpuc_epochs"]
    figure_paths = {n: tmp_path / f"{n}.png" for n in [*names, "throughput", "topk"]}
    ours, theirs = tmp_path / "metrics.csv", tmp_path / "single_process" / "metrics.csv"
    topk_files = {"resnet18_momentum.1": topk}
    data_parallel.summarize(runs, book_code, topk_files, RECORDS, ours, figure_paths, BOOK)
    single_process.summarize(book_code, theirs, BOOK)
    m = pd.read_csv(ours).set_index("metric")
    assert m.loc["lenet.speedup", "value"] == 2.0
    assert abs(m.loc["resnet18_momentum.acc_change", "value"] + 0.1) < 1e-12
    assert all(path.exists() for path in figure_paths.values())
    assert m.loc["lenet.1.test_acc", "machine"] == "m1"
    assert m.loc["lenet.speedup", "machine"] == "m1 m2"
    assert not m.index.str.startswith("single_process_").any()
    assert "node1" in footers["topk"] and "node2" not in footers["topk"]
    assert all(n in footers["throughput"] for n in ("node1", "node2"))
    book = pd.read_csv(theirs).set_index("metric")
    assert book.loc["single_process_lenet.2.test_acc", "machine"] == "m2"
    assert book.loc["single_process_lenet.speedup", "machine"] == "m2"
    # The book's code ran on a job with 2 GPUs: its claim is judged from its own file.
    judged = claims.evaluate_claim(shipped_claims()["mgpu.2gpu.book"], book.reset_index(), RECORDS)
    assert judged["verdict"] != NOT_APPLICABLE, judged
    # The preset scaled nothing here: no figure says it was scaled.
    assert not any("Scaled" in note for note in notes.values())


def test_each_figure_says_what_the_preset_scaled_of_the_runs_it_draws(tmp_path, notes):
    """The ResNet-18 figures name the scale of ResNet-18's runs, LeNet's of LeNet's; the
    seeds and the throughput of every run concern all."""
    h = training_history([2.3, 1.0]).assign(world_size=1, batch_size=256, lr=0.1, machine="m1")
    runs = {}
    for name, model in (("lenet.1", "lenet"), ("resnet18.1", "resnet18")):
        h.assign(model=model, train_acc=0.5).drop(columns="seed").to_csv(
            tmp_path / f"{name}.seed0.csv", index=False
        )
        runs[name, 0] = tmp_path / f"{name}.seed0.csv"
    names = ["mgpu_test_acc", "mgpu_epochs", "mgpuc_test_acc", "mgpuc_epochs", "throughput"]
    figure_paths = {n: tmp_path / f"{n}.png" for n in [*names, "topk"]}
    scaled = [
        ["data_parallel.seeds", [0, 1, 2], [0]],
        ["data_parallel.runs.resnet18.1.epochs", 10, 1],
        ["data_parallel.runs.resnet18.1.train_subset", None, 1024],
    ]
    metrics = tmp_path / "metrics.csv"
    data_parallel.summarize(runs, [], {}, RECORDS, metrics, figure_paths, BOOK, scaled)
    resnet = "resnet18.1: 1 of 10 epochs, 1,024 of 60,000 training images"
    for name in ("mgpuc_test_acc", "mgpuc_epochs", "throughput", "topk"):
        assert "1 of 3 seeds" in notes[name] and resnet in notes[name], name
    for name in ("mgpu_test_acc", "mgpu_epochs"):
        assert "1 of 3 seeds" in notes[name] and "resnet18" not in notes[name], name


@pytest.mark.parametrize(
    "run, message",
    [
        ({"devices": 3, "nodes": 2}, "3 devices do not split evenly over 2 nodes"),
        ({"batch_size": 255}, "batch_size 255 does not split evenly over 2 devices"),
    ],
)
def test_runs_must_split_over_their_nodes_and_devices(run, message):
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    runs = config["data_parallel"]["runs"]
    runs["lenet.2"] |= {"nodes": 1} | run
    with pytest.raises(ValueError, match=f"'data_parallel.runs.lenet.2': {message}"):
        data_parallel.check_runs(runs)
    # a preset's null may not leave out a run the one-process code needs
    config["presets"]["smoke"] = {"data_parallel": {"runs": {"lenet.2": None}}}
    smoke = settings.resolve({**config, "preset": "smoke"}).values["data_parallel"]["runs"]
    with pytest.raises(ValueError, match="'data_parallel.runs.lenet.2': missing"):
        data_parallel.check_runs(smoke)
