import torch
from torch import nn

from d2lrepro.multidevice import architectures


def test_a_linear_layers_training_flops_are_counted():
    # forward 2·3·2 = 12; backward: the weight's gradient, 12 (the image needs none)
    layer = nn.Sequential(nn.Flatten(), nn.Linear(3, 2, bias=False))
    assert architectures.training_flops(layer, size=1) == 24
    # a second layer (2 -> 2): forward 8, its weight gradient 8, and its input's gradient 8
    two = nn.Sequential(nn.Flatten(), nn.Linear(3, 2, bias=False), nn.Linear(2, 2, bias=False))
    assert architectures.training_flops(two, size=1) == 24 + 24
    assert architectures.parameter_bytes(layer) == 6 * 4


def test_the_books_models_classify_imagenet_sized_images():
    for name, make in architectures.MODELS.items():
        with torch.device("meta"):
            out = make()(torch.zeros(2, 3, 224, 224))
        assert out.shape == (2, architectures.CLASSES), name


def test_ratio_metrics_per_model():
    rows = {r["metric"]: r["value"] for r in architectures.ratio_metrics()}
    for name in architectures.MODELS:
        flops, mb = rows[f"arch.{name}.gflops"] * 1e9, rows[f"arch.{name}.param_mb"] * 1e6
        assert abs(rows[f"arch.{name}.flops_per_byte"] - flops / mb) < 1e-6 * flops / mb
    assert 50 < rows["arch.alexnet.param_mb"] / 4 < 60  # AlexNet's ~57 M parameters (1000 classes)
