"""Computation against communication (``mgpu.compute_ratio``; the study notes, §6.2.3.2: a model
needs a good ratio of FLOPs to model size, Inception > ResNet > AlexNet): the FLOPs of one
training step (forward and backward) per byte of parameters, counted with
``torch.utils.flop_counter`` on the models as the book defines them, all on the same ImageNet-
sized input.

Metrics: ``arch.{alexnet,resnet18,googlenet}.{gflops,param_mb,flops_per_byte}``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from d2lrepro.core.models import resnet18
from d2lrepro.core.results import metric

IMAGE = 224  # the ImageNet size AlexNet and GoogLeNet were designed for
CLASSES = 1000


def alexnet(num_classes: int = CLASSES, in_channels: int = 3) -> nn.Sequential:
    """The book's AlexNet (chapter alexnet), for ``IMAGE`` x ``IMAGE`` input."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 96, kernel_size=11, stride=4, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Conv2d(96, 256, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Conv2d(256, 384, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 384, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 256, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Flatten(),
        nn.Linear(6400, 4096),
        nn.ReLU(),
        nn.Dropout(p=0.5),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Dropout(p=0.5),
        nn.Linear(4096, num_classes),
    )


class Inception(nn.Module):
    """The book's Inception block: 1x1, 1x1-3x3, 1x1-5x5 and pool-1x1 paths, concatenated."""

    def __init__(self, in_channels: int, c1: int, c2: tuple, c3: tuple, c4: int):
        super().__init__()
        self.p1 = nn.Conv2d(in_channels, c1, kernel_size=1)
        self.p2_1 = nn.Conv2d(in_channels, c2[0], kernel_size=1)
        self.p2_2 = nn.Conv2d(c2[0], c2[1], kernel_size=3, padding=1)
        self.p3_1 = nn.Conv2d(in_channels, c3[0], kernel_size=1)
        self.p3_2 = nn.Conv2d(c3[0], c3[1], kernel_size=5, padding=2)
        self.p4_1 = nn.MaxPool2d(kernel_size=3, stride=1, padding=1)
        self.p4_2 = nn.Conv2d(in_channels, c4, kernel_size=1)

    def forward(self, x):
        p1 = F.relu(self.p1(x))
        p2 = F.relu(self.p2_2(F.relu(self.p2_1(x))))
        p3 = F.relu(self.p3_2(F.relu(self.p3_1(x))))
        p4 = F.relu(self.p4_2(self.p4_1(x)))
        return torch.cat((p1, p2, p3, p4), dim=1)


def googlenet(num_classes: int = CLASSES, in_channels: int = 3) -> nn.Sequential:
    """The book's GoogLeNet (chapter googlenet): five stages, nine Inception blocks."""
    pool = {"kernel_size": 3, "stride": 2, "padding": 1}
    return nn.Sequential(
        nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3),
        nn.ReLU(),
        nn.MaxPool2d(**pool),
        nn.Conv2d(64, 64, kernel_size=1),
        nn.ReLU(),
        nn.Conv2d(64, 192, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(**pool),
        Inception(192, 64, (96, 128), (16, 32), 32),
        Inception(256, 128, (128, 192), (32, 96), 64),
        nn.MaxPool2d(**pool),
        Inception(480, 192, (96, 208), (16, 48), 64),
        Inception(512, 160, (112, 224), (24, 64), 64),
        Inception(512, 128, (128, 256), (24, 64), 64),
        Inception(512, 112, (144, 288), (32, 64), 64),
        Inception(528, 256, (160, 320), (32, 128), 128),
        nn.MaxPool2d(**pool),
        Inception(832, 256, (160, 320), (32, 128), 128),
        Inception(832, 384, (192, 384), (48, 128), 128),
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Flatten(),
        nn.Linear(1024, num_classes),
    )


MODELS = {
    "alexnet": alexnet,
    "resnet18": lambda: resnet18(CLASSES, in_channels=3, large=True),
    "googlenet": googlenet,
}


def training_flops(net: nn.Module, size: int = IMAGE) -> int:
    """FLOPs of one forward and backward pass of ``net`` on one ``size`` x ``size`` image (on
    the meta device the counting costs no arithmetic)."""
    x = torch.zeros(1, 3, size, size, device=next(net.parameters()).device)
    with FlopCounterMode(display=False) as counter:
        net(x).sum().backward()
    return counter.get_total_flops()


def parameter_bytes(net: nn.Module) -> int:
    """Bytes a worker sends per step: one gradient value per parameter."""
    return sum(p.numel() * p.element_size() for p in net.parameters())


def ratio_metrics(size: int = IMAGE) -> list[dict]:
    """Per model: training GFLOPs per image, parameter MB, and FLOPs per parameter byte."""
    rows = []
    for name, make in MODELS.items():
        with torch.device("meta"):
            net = make()
        flops, size_bytes = training_flops(net, size), parameter_bytes(net)
        rows += [
            metric(f"arch.{name}.gflops", flops / 1e9, "GFLOP"),
            metric(f"arch.{name}.param_mb", size_bytes / 1e6, "MB"),
            metric(f"arch.{name}.flops_per_byte", flops / size_bytes, "FLOP/B"),
        ]
    return rows
