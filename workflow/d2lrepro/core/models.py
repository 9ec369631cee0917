"""Every network of the package: the lr-scheduling LeNet, the compilers MLP, the from-scratch
LeNet of the multi-GPU section and the modified ResNet-18 of its concise version."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# name -> shape of the from-scratch LeNet's parameters, in the order lenet_forward takes them
LENET_SHAPES = {
    "W1": (20, 1, 3, 3),
    "b1": (20,),
    "W2": (50, 20, 5, 5),
    "b2": (50,),
    "W3": (800, 128),
    "b3": (128,),
    "W4": (128, 10),
    "b4": (10,),
}


def lenet_params(seed: int = 0, scale: float = 0.01) -> list[torch.Tensor]:
    """The section's parameters: weights ``randn * scale`` drawn under ``seed``, zero biases;
    each requires grad. The global RNG is not touched."""
    generator = torch.Generator().manual_seed(seed)
    params = []
    for name, shape in LENET_SHAPES.items():
        if name.startswith("W"):
            param = torch.randn(shape, generator=generator) * scale
        else:
            param = torch.zeros(shape)
        params.append(param.requires_grad_())
    return params


def lenet_forward(X: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    """The section's ``lenet(X, params)``: two conv/ReLU/average-pool stages, two dense layers."""
    W1, b1, W2, b2, W3, b3, W4, b4 = params
    h1 = F.avg_pool2d(F.relu(F.conv2d(X, W1, b1)), kernel_size=2, stride=2)
    h2 = F.avg_pool2d(F.relu(F.conv2d(h1, W2, b2)), kernel_size=2, stride=2)
    h3 = F.relu(h2.flatten(1) @ W3 + b3)
    return h3 @ W4 + b4


def lenet(seed: int | None = 0) -> nn.Sequential:
    """The lr-scheduling section's LeNet (ReLU, max pooling), PyTorch default init drawn
    under ``seed``.

    The global RNG is left as it was; ``seed=None`` draws from it instead.
    """

    def build() -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, 10),
        )

    if seed is None:
        return build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def mlp(seed: int = 0) -> nn.Sequential:
    """The compilers section's MLP (512-256-128-2, 164,482 parameters), initialized from
    ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 2)
    )


class ScratchLeNet(nn.Module):
    """The from-scratch LeNet's parameter list as a module, so that ``state_dict`` and
    :func:`~d2lrepro.core.data.evaluate_accuracy` apply to it."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self.params = nn.ParameterList(lenet_params(seed))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return lenet_forward(X, list(self.params))


class Residual(nn.Module):
    """The book's residual block: two 3x3 conv/BN layers, optionally a strided 1x1 conv shortcut."""

    def __init__(
        self, in_channels: int, out_channels: int, use_1x1conv: bool = False, stride: int = 1
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1)
        self.conv3 = (
            nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride)
            if use_1x1conv
            else None
        )
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def _stage(in_channels: int, out_channels: int, first: bool) -> nn.Sequential:
    if first:
        return nn.Sequential(
            Residual(in_channels, out_channels), Residual(out_channels, out_channels)
        )
    return nn.Sequential(
        Residual(in_channels, out_channels, use_1x1conv=True, stride=2),
        Residual(out_channels, out_channels),
    )


def resnet18(num_classes: int = 10, in_channels: int = 1, large: bool = False) -> nn.Sequential:
    """The concise multi-GPU section's ResNet-18: a 3x3 stride-1 stem without max pooling
    (small images), four stages of two residual blocks, global average pooling, one dense layer.
    ``large``: the stem of the book's ResNet chapter for ImageNet-sized images instead (7x7
    stride-2 convolution, then 3x3 stride-2 max pooling)."""
    stem = (
        [nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3)]
        if large
        else [nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1)]
    )
    net = nn.Sequential(*stem, nn.BatchNorm2d(64), nn.ReLU())
    if large:
        net.append(nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
    net.add_module("resnet_block1", _stage(64, 64, first=True))
    net.add_module("resnet_block2", _stage(64, 128, first=False))
    net.add_module("resnet_block3", _stage(128, 256, first=False))
    net.add_module("resnet_block4", _stage(256, 512, first=False))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


def init_normal_(module: nn.Module, seed: int = 0, std: float = 0.01) -> nn.Module:
    """The book's ``init_weights``: Normal(0, std) weights for modules whose type is exactly
    ``nn.Linear`` or ``nn.Conv2d``, drawn under ``seed``; biases and other modules keep theirs."""
    generator = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if type(m) in (nn.Linear, nn.Conv2d):
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator) * std)
    return module


__all__ = [
    "lenet",
    "mlp",
    "ScratchLeNet",
    "LENET_SHAPES",
    "lenet_params",
    "lenet_forward",
    "Residual",
    "resnet18",
    "init_normal_",
]
