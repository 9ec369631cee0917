"""Every network of the package, built and initialized as the book does (d2lrepro.core.models)."""

import torch
from torch import nn

from d2lrepro.core import models
from d2lrepro.core.models import LENET_SHAPES, init_normal_, lenet_forward, lenet_params, resnet18


def test_lenet_params_and_forward():
    params = lenet_params(seed=0)
    assert [tuple(p.shape) for p in params] == list(LENET_SHAPES.values())
    assert all(p.requires_grad for p in params)
    assert all(torch.count_nonzero(p) == 0 for p in params[1::2])
    assert 0.009 < float(params[4].detach().std()) < 0.011
    state = torch.get_rng_state()
    again = lenet_params(seed=0)
    assert torch.equal(state, torch.get_rng_state())
    assert all(torch.equal(a, b) for a, b in zip(params, again))
    assert lenet_forward(torch.zeros(2, 1, 28, 28), params).shape == (2, 10)


def test_resnet18_shape_and_size():
    net = resnet18(num_classes=10, in_channels=1)
    net.eval()
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    count = sum(p.numel() for p in net.parameters())
    assert count == 11_175_818 and round(count / 1e6, 1) == 11.2
    assert not any(isinstance(m, nn.MaxPool2d) for m in net.modules())


def test_init_normal_touches_only_linear_and_conv_weights():
    class MyLinear(nn.Linear):
        pass

    net = nn.Sequential(
        nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.Linear(1000, 200), MyLinear(4, 4)
    )
    before = {k: v.clone() for k, v in net.state_dict().items()}
    init_normal_(net, seed=1)
    after = net.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"0.weight", "2.weight"}
    assert (
        0.009 < float(after["2.weight"].std()) < 0.011
        and abs(float(after["2.weight"].mean())) < 1e-3
    )
    other = init_normal_(nn.Sequential(nn.Conv2d(3, 64, 3)), seed=1)
    assert torch.equal(other[0].weight, after["0.weight"])


def test_copies_start_from_the_books_parameters():
    assert models.lenet_params(0)[1].abs().sum() == 0


def test_the_lenet_of_a_seed_is_drawn_apart_from_the_global_rng():
    state = torch.get_rng_state()
    one, again, other = models.lenet(seed=3), models.lenet(seed=3), models.lenet(seed=4)
    assert torch.equal(state, torch.get_rng_state())
    assert all(torch.equal(a, b) for a, b in zip(one.parameters(), again.parameters()))
    assert not torch.equal(one[0].weight, other[0].weight)
    assert one(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    torch.manual_seed(0)
    drawn = models.lenet(seed=None)
    torch.manual_seed(0)
    assert torch.equal(drawn[0].weight, models.lenet(seed=None)[0].weight)


def test_the_mlp_has_the_book_s_size_and_the_scratch_lenet_its_parameters():
    net = models.mlp(seed=0)
    assert sum(p.numel() for p in net.parameters()) == 164_482
    assert net(torch.zeros(3, 512)).shape == (3, 2)
    scratch = models.ScratchLeNet(seed=0)
    assert list(scratch.state_dict()) == [f"params.{i}" for i in range(len(LENET_SHAPES))]
    assert all(torch.equal(p, q) for p, q in zip(scratch.parameters(), lenet_params(seed=0)))
    x = torch.rand(2, 1, 28, 28)
    torch.testing.assert_close(scratch(x), lenet_forward(x, lenet_params(seed=0)))
