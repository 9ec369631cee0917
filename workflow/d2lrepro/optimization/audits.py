"""The audits of the chapter's update rules: an optimizer's state and steps, read after each
real step, set against the book's rule recomputed in float64 from the gradients it was fed,
recorded apart from it. Through the airfoil runs
(:func:`d2lrepro.optimization.airfoil.updater`) they serve ``adagrad.effective_lr``,
``adadelta.averages``, ``adam.bias_correction`` and ``adam.yogi_update``.

Each gap is the largest since the last :meth:`Audit.take` (NaN where no step was audited): a
state's gap relative to the scale of what it accumulates (float32 rounding is relative to it),
a step's relative to the norm of the step the rule gives. A right rule gives float32 rounding.
"""

from __future__ import annotations

import math

import torch

# Adam's and Yogi's β1 and β2, the book's and torch.optim's defaults alike.
BETA1, BETA2 = 0.9, 0.999
# Where the float32 comparison g² − s cannot tell its sign: |g² − s| within this share of s.
TIE = 1e-6


def _gap(actual: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor) -> float:
    """The largest |actual − expected| relative to ``scale``, coordinate by coordinate."""
    return ((actual - expected).abs() / scale.clamp_min(1e-300)).max().item()


def _step_gap(taken: torch.Tensor, expected: torch.Tensor) -> float:
    """How far the step taken is from the expected one, relative to the expected one's norm."""
    norm = max(torch.linalg.vector_norm(expected).item(), 1e-300)
    return torch.linalg.vector_norm(taken - expected).item() / norm


class _Leaky:
    """A leaky average β a + (1 − β) x in float64 of what an optimizer is fed, with the same
    average of |x| (the scale of its rounding) and the weight its terms carry together,
    (1 − β) Σ βᵏ = 1 − βᵗ, summed term by term (the book's re-normalization)."""

    def __init__(self, beta: float, like: torch.Tensor):
        self.beta = beta
        self.value = torch.zeros(like.shape, dtype=torch.float64)
        self.scale = torch.zeros_like(self.value)
        self.weight = 0.0

    def add(self, x: torch.Tensor) -> None:
        b = self.beta
        self.value = b * self.value + (1 - b) * x
        self.scale = b * self.scale + (1 - b) * x.abs()
        self.weight = b * self.weight + (1 - b)


class Audit:
    """An optimizer's parameter ``param`` audited step by step: :meth:`before` records the
    gradient it is about to be fed and where it stands, :meth:`after` reads its state (a dict
    in the book's names) and compares; a subclass's :meth:`gaps` gives the gaps of one step."""

    names: tuple[str, ...] = ()

    def __init__(self, param: torch.Tensor, lr: float):
        self.param, self.lr = param, lr
        self.worst = dict.fromkeys(self.names, 0.0)
        self.audited = 0  # steps audited since the last take(): none reads NaN, not 0

    def before(self) -> None:
        self.grad = self.param.grad.detach().to(torch.float64).clone()
        self.start = self.param.detach().to(torch.float64).clone()

    def after(self, state: dict[str, torch.Tensor]) -> None:
        self.audited += 1
        taken = self.start - self.param.detach().to(torch.float64)
        read = {
            k: v.detach().to(torch.float64).clone()
            for k, v in state.items()
            if isinstance(v, torch.Tensor)  # not the step count t
        }
        for name, gap in self.gaps(self.grad, taken, read).items():
            self.worst[name] = max(self.worst[name], gap)

    def gaps(self, g: torch.Tensor, taken: torch.Tensor, state: dict) -> dict[str, float]:
        raise NotImplementedError

    def take(self) -> dict[str, float]:
        gaps = dict(self.worst) if self.audited else dict.fromkeys(self.names, math.nan)
        self.worst = dict.fromkeys(self.names, 0.0)
        self.audited = 0
        return gaps


class AdagradAudit(Audit):
    """Adagrad (§12.7): ``state_gap``, the state s against the running sum of the squared
    gradients, and ``step_gap``, the step against η g / √(Σ g² + ε). An accumulator that keeps
    only the last g², sums |g| or a step without the square root give far more than rounding."""

    names = ("state_gap", "step_gap")

    def __init__(self, lr: float, param: torch.Tensor, eps: float = 1e-6):
        super().__init__(param, lr)
        self.eps = eps
        self.total = torch.zeros(param.shape, dtype=torch.float64)

    def gaps(self, g, taken, state):
        self.total = self.total + g**2
        expected = self.lr * g / torch.sqrt(self.total + self.eps)
        return {
            "state_gap": _gap(state["s"], self.total, self.total),
            "step_gap": _step_gap(taken, expected),
        }


class AdadeltaAudit(Audit):
    """Adadelta (§12.9): ``s_gap``, s against the leaky average (ρ) of the squared gradients;
    ``delta_gap``, Δx against the leaky average (ρ) of the squared steps the parameter took
    (over the lr, 1 in the book); ``step_gap``, the step against
    lr √(Δxₜ₋₁ + ε) / √(sₜ + ε) gₜ, with both averages from the recorded gradients and steps."""

    names = ("s_gap", "delta_gap", "step_gap")

    def __init__(self, param: torch.Tensor, rho: float, eps: float, lr: float = 1.0):
        super().__init__(param, lr)
        self.eps = eps
        self.s, self.delta = _Leaky(rho, param), _Leaky(rho, param)

    def gaps(self, g, taken, state):
        self.s.add(g**2)
        expected = self.lr * torch.sqrt(self.delta.value + self.eps)
        expected = expected / torch.sqrt(self.s.value + self.eps) * g
        self.delta.add((taken / self.lr) ** 2)
        return {
            "s_gap": _gap(state["s"], self.s.value, self.s.scale),
            "delta_gap": _gap(state["delta"], self.delta.value, self.delta.scale),
            "step_gap": _step_gap(taken, expected),
        }


class AdamAudit(Audit):
    """Adam (§12.10): ``v_gap`` and ``s_gap``, v and s against the leaky averages (β1, β2) of
    the gradients and their squares; ``step_gap``, the step against η v̂ / (√ŝ + ε) with v̂
    and ŝ those averages divided by the weight their terms carry (1 − βᵗ, summed term by term);
    and ``first_step_gap``, coordinate by coordinate, the first step against η g₁ / (|g₁| + ε),
    the step v̂₁ = g₁ and ŝ₁ = g₁² give (kept from the first step on, NaN before it)."""

    names = ("v_gap", "s_gap", "step_gap")

    def __init__(self, param: torch.Tensor, lr: float, eps: float):
        super().__init__(param, lr)
        self.eps = eps
        self.v, self.s = _Leaky(BETA1, param), _Leaky(BETA2, param)
        self.first = math.nan

    def gaps(self, g, taken, state):
        self.v.add(g)
        self.s.add(g**2)
        v_hat, s_hat = self.v.value / self.v.weight, self.s.value / self.s.weight
        if math.isnan(self.first):
            first = self.lr * g / (g.abs() + self.eps)
            self.first = _gap(taken, first, first.abs())
        return {
            "v_gap": _gap(state["v"], self.v.value, self.v.scale),
            "s_gap": _gap(state["s"], self.s.value, self.s.scale),
            "step_gap": _step_gap(taken, self.lr * v_hat / (torch.sqrt(s_hat) + self.eps)),
        }

    def take(self) -> dict[str, float]:
        return super().take() | {"first_step_gap": self.first}


class YogiAudit(Audit):
    """Yogi (§12.10.3): ``v_gap``, v as Adam's; ``s_step_gap``, each step's change of s against
    (1 − β2) g² sgn(g² − sₜ₋₁), from s₀ = 0 and then from the s read after the step before
    (relative to the larger of sₜ₋₁ and sₜ; where float32 cannot tell the sign of g² − sₜ₋₁,
    either sign passes); ``step_gap``, the step against η v̂ / (√ŝ + ε) with ŝ the s read
    divided by 1 − β2ᵗ, summed term by term."""

    names = ("v_gap", "s_step_gap", "step_gap")

    def __init__(self, param: torch.Tensor, lr: float, eps: float):
        super().__init__(param, lr)
        self.eps = eps
        self.v = _Leaky(BETA1, param)
        self.prior = torch.zeros(param.shape, dtype=torch.float64)
        self.weight2 = 0.0

    def gaps(self, g, taken, state):
        self.v.add(g)
        self.weight2 = BETA2 * self.weight2 + (1 - BETA2)
        s, prior, g2 = state["s"], self.prior, g**2
        up = (s - (prior + (1 - BETA2) * g2)).abs()
        down = (s - (prior - (1 - BETA2) * g2)).abs()
        off = torch.where(g2 > prior, up, down)
        off = torch.where((g2 - prior).abs() <= TIE * prior, torch.minimum(up, down), off)
        self.prior = s
        expected = self.lr * (self.v.value / self.v.weight)
        expected = expected / (torch.sqrt(s / self.weight2) + self.eps)
        return {
            "v_gap": _gap(state["v"], self.v.value, self.v.scale),
            "s_step_gap": _gap(off, torch.zeros_like(off), torch.maximum(prior, s)),
            "step_gap": _step_gap(taken, expected),
        }


# The audit of each optimizer and implementation, from the run's hyper-parameters and the
# parameter audited, with the eps each rule uses: the book's from scratch, torch.optim's
# defaults (and Adadelta's lr 1) for its counterparts.
AUDITS = {
    ("adagrad", "scratch"): lambda h, p: AdagradAudit(h["lr"], p),
    ("adadelta", "scratch"): lambda h, p: AdadeltaAudit(p, h["rho"], eps=1e-5),
    ("adadelta", "torch"): lambda h, p: AdadeltaAudit(p, h["rho"], eps=1e-6, lr=1.0),
    ("adam", "scratch"): lambda h, p: AdamAudit(p, h["lr"], eps=1e-6),
    ("adam", "torch"): lambda h, p: AdamAudit(p, h["lr"], eps=1e-8),
    ("yogi", "scratch"): lambda h, p: YogiAudit(p, h["lr"], eps=1e-3),
}
# torch.optim's names of the book's state, for the counterparts audited.
TORCH_STATE = {
    "adadelta": {"s": "square_avg", "delta": "acc_delta"},
    "adam": {"v": "exp_avg", "s": "exp_avg_sq"},
}


def audit_for(optimizer: str, implementation: str, hyper: dict, param) -> Audit | None:
    """The audit of ``optimizer`` as ``implementation`` runs it, on ``param``; None where
    none is kept."""
    make = AUDITS.get((optimizer, implementation))
    return make(hyper, param) if make else None
