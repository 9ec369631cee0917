"""The airfoil claims judged on the real airfoil data through the real code path, and with
that code broken: each check follows its evidence both ways."""

import re
from functools import partial

import pandas as pd
import pytest
import torch
import yaml

from conftest import (
    REPO,
    judged,
    measured_on,
    shipped_claims,
    skip_if_shared,
    timed_alone,
    verdict_of,
)
from d2lrepro.core import reference
from d2lrepro.core.results import RUN_SPREAD, metric
from d2lrepro.optimization import airfoil, airfoil_compare, airfoil_summary, optimizers, traces
from d2lrepro.pipeline import claims

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())["airfoil"]
BOOK = reference.load()
CURVES = [name for name in CONFIG["settings"] if name in set(BOOK["id"])]


def summary(airfoil_data, names):
    settings = {n: CONFIG["settings"][n] for n in names}
    runs = airfoil.run_sweep(settings, airfoil_data, CONFIG["seeds"], CONFIG["epochs"], 10, 200)
    rows = airfoil_summary.setting_metrics(pd.concat(runs.values(), ignore_index=True), BOOK)
    for name in names:
        setting = CONFIG["settings"][name]
        if setting["implementation"] == "torch":
            rows += airfoil_compare.compare_implementation(
                name, setting, airfoil_data, 2, 10, 200, 0
            )
    return rows


def with_rule(monkeypatch, optimizer: str, rule) -> None:
    """The from-scratch ``optimizer`` with ``rule`` as its update (its torch.optim counterpart
    unchanged)."""
    kept = optimizers.OPTIMIZERS[optimizer]
    monkeypatch.setitem(
        optimizers.OPTIMIZERS, optimizer, optimizers.Optimizer(rule, kept.state, kept.concise)
    )


def with_concise(monkeypatch, optimizer: str, concise) -> None:
    """``optimizer``'s torch.optim counterpart built by ``concise(params, hyper)``."""
    kept = optimizers.OPTIMIZERS[optimizer]
    monkeypatch.setitem(
        optimizers.OPTIMIZERS, optimizer, optimizers.Optimizer(kept.rule, kept.state, concise)
    )


def momentum_beta_on_the_gradient(monkeypatch):
    """v ← v + β g instead of v ← β v + g: β weighs the wrong term."""

    def rule(p, g, state, hyper):
        v = state["v"]
        v.copy_(v + hyper["momentum"] * g)
        p.sub_(hyper["lr"] * v)

    with_rule(monkeypatch, "sgd_momentum", rule)


def momentum_dampened(monkeypatch):
    """torch.optim.SGD with dampening = momentum: the velocity averages (1 - β) g instead of
    summing g, as an exponential average would."""
    with_concise(
        monkeypatch,
        "sgd_momentum",
        lambda ps, h: torch.optim.SGD(
            ps, lr=h["lr"], momentum=h["momentum"], dampening=h["momentum"]
        ),
    )


def adagrad_steps_before_accumulating(monkeypatch):
    """The update order swapped: the step divides by √(s + ε) before g² is added to s."""

    def rule(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
        s = state["s"]
        p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))
        s.add_(g**2)

    with_rule(monkeypatch, "adagrad", rule)


def adagrad_gradients_never_zeroed(monkeypatch):
    """torch.optim.Adagrad whose zero_grad is left out: each step's gradient adds to the last."""

    def concise(ps, h):
        trainer = torch.optim.Adagrad(ps, lr=h["lr"])
        trainer.zero_grad = lambda set_to_none=True: None
        return trainer

    with_concise(monkeypatch, "adagrad", concise)


def rmsprop_gamma_on_the_gradient(monkeypatch):
    """s ← (1 - γ) s + γ g² instead of γ s + (1 - γ) g²: γ weighs the wrong term."""

    def rule(p, g, state, hyper, eps=1e-6):
        gamma, s = hyper["gamma"], state["s"]
        s.copy_((1 - gamma) * s + gamma * g**2)
        p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))

    with_rule(monkeypatch, "rmsprop", rule)


def rmsprop_leaks_abs_g(monkeypatch):
    """s ← γ s + (1 - γ) |g| instead of g²: a leaky average of the gradient's size."""

    def rule(p, g, state, hyper, eps=1e-6):
        gamma, s = hyper["gamma"], state["s"]
        s.copy_(gamma * s + (1 - gamma) * g.abs())
        p.sub_(hyper["lr"] * g / torch.sqrt(s + eps))

    with_rule(monkeypatch, "rmsprop", rule)


def rmsprop_alpha_is_one_minus_gamma(monkeypatch):
    """torch.optim.RMSprop with alpha = 1 - γ: torch's alpha read as the weight of g²."""
    with_concise(
        monkeypatch,
        "rmsprop",
        lambda ps, h: torch.optim.RMSprop(ps, lr=h["lr"], alpha=1 - h["gamma"]),
    )


def adadelta_eps(monkeypatch):
    """The scratch and torch.optim Adadelta with each other's eps (1e-5 and 1e-6)."""
    scratch = optimizers.OPTIMIZERS["adadelta"]
    monkeypatch.setitem(
        optimizers.OPTIMIZERS,
        "adadelta",
        optimizers.Optimizer(
            partial(scratch.rule, eps=1e-6),
            scratch.state,
            lambda ps, h: torch.optim.Adadelta(ps, rho=h["rho"], eps=1e-5),
        ),
    )


def adam_without_bias_correction(monkeypatch):
    """Adam (and Yogi, which shares its rule) with the bias correction left out: v̂ = v,
    ŝ = s."""

    def rule(p, g, state, hyper, eps=1e-6, yogi=False):
        beta1, beta2, v, s = 0.9, 0.999, state["v"], state["s"]
        eps = hyper.get("eps", eps)
        v.copy_(beta1 * v + (1 - beta1) * g)
        if yogi:
            s.add_((1 - beta2) * torch.sign(g**2 - s) * g**2)
        else:
            s.copy_(beta2 * s + (1 - beta2) * g**2)
        p.sub_(hyper["lr"] * v / (torch.sqrt(s) + eps))  # v / (1 - β1^t), s / (1 - β2^t) left out
        state["t"] += 1

    with_rule(monkeypatch, "adam", rule)
    with_rule(monkeypatch, "yogi", partial(rule, eps=1e-3, yogi=True))


def adam_betas_swapped(monkeypatch):
    """torch.optim.Adam with its betas in the wrong order, (0.999, 0.9)."""
    with_concise(
        monkeypatch, "adam", lambda ps, h: torch.optim.Adam(ps, lr=h["lr"], betas=(0.999, 0.9))
    )


# Each curve claim, and the small plausible mutation of the code it is about that must fail it.
MUTATIONS = {
    "momentum.lr0.02_m0.5": momentum_beta_on_the_gradient,
    "momentum.lr0.01_m0.9": momentum_beta_on_the_gradient,
    "momentum.lr0.005_m0.9": momentum_beta_on_the_gradient,
    "momentum.concise": momentum_dampened,
    "adagrad.scratch_lr0.1": adagrad_steps_before_accumulating,
    "adagrad.concise": adagrad_gradients_never_zeroed,
    "rmsprop.scratch": rmsprop_gamma_on_the_gradient,
    "rmsprop.concise": rmsprop_alpha_is_one_minus_gamma,
    "adadelta.scratch": adadelta_eps,
    "adadelta.concise": adadelta_eps,
    "adam.scratch_lr0.01": adam_without_bias_correction,
    "adam.concise": adam_betas_swapped,
    "adam.yogi": adam_without_bias_correction,
}


def test_every_curve_claim_has_a_mutation():
    assert sorted(MUTATIONS) == sorted(CURVES)


def curve_checks_verdict(name: str, rows) -> str:
    """The claim judged by its checks other than the final loss's: where the seeds end against
    the editions' printed final points is this run's finding, which the report shows, not a
    property of the code that a mutation changes."""
    claim = shipped_claims()[name]
    kept = [c for c in claim["checks"] if c.get("metric") != f"{name}.final_loss"]
    return claims.evaluate_claim(claim | {"checks": kept}, *measured_on(rows))["verdict"]


# The mutations whose runs the airfoil claim cannot tell from the book's beyond their noise
# (one seed's curve lies near the book's, their middle half meets its final loss): the claim
# that catches each, and a mutation of the same rule the airfoil claim catches.
CAUGHT_ELSEWHERE = {"rmsprop.scratch": ("rmsprop.2d", rmsprop_leaks_abs_g)}


@pytest.mark.parametrize("name", CURVES)
def test_each_curve_claim_follows_the_code(airfoil_data, monkeypatch, name):
    """The real code passes the claim's curve checks (its final loss is judged in the report);
    on the code broken in a small way the curve checks and the claim as a whole read "not
    reproduced", or within the noise where a single run of the broken code could still draw
    the book's curve; a larger break of that rule then reads "not reproduced"."""
    assert curve_checks_verdict(name, summary(airfoil_data, [name])) == claims.REPRODUCED
    with monkeypatch.context() as broken:
        MUTATIONS[name](broken)
        rows = summary(airfoil_data, [name])
    expected = claims.INCONCLUSIVE if name in CAUGHT_ELSEWHERE else claims.NOT_REPRODUCED
    assert curve_checks_verdict(name, rows) == verdict_of(name, rows) == expected
    if name in CAUGHT_ELSEWHERE:
        CAUGHT_ELSEWHERE[name][1](monkeypatch)
        rows = summary(airfoil_data, [name])
        assert curve_checks_verdict(name, rows) == claims.NOT_REPRODUCED


@pytest.mark.parametrize("name", sorted(CAUGHT_ELSEWHERE))
def test_a_mutation_within_the_curves_noise_breaks_the_books_trace(monkeypatch, name):
    """The book's deterministic 2-D trace of the same rule, printed to six decimals, does not
    reproduce on it."""
    cfg, trace = (
        yaml.safe_load((REPO / "config.yaml").read_text())["traces"],
        CAUGHT_ELSEWHERE[name][0],
    )

    def rows() -> list[dict]:
        runs = traces.run_traces({trace: cfg["runs"][trace]}, cfg["steps"], cfg["start"])
        return traces.trace_metrics(runs)

    assert verdict_of(trace, rows()) == claims.REPRODUCED
    MUTATIONS[name](monkeypatch)
    assert verdict_of(trace, rows()) == claims.NOT_REPRODUCED


# The curve claims whose final loss is judged against the editions' final points (their
# window, the rounding of three printed decimals included) as typical runs of the code.


@pytest.mark.parametrize("name", CURVES)
def test_each_curve_claim_reads_its_tolerance(name):
    """The curve's excess passes inside the plot's tolerance and fails beyond it. The final
    loss passes where the editions' window meets the seeds' middle half, is within the noise
    where it meets only their extremes, and fails where it lies beyond every seed, once the
    seeds are enough for that to be a finding (5 of them against 3 editions, p = 0.036 by
    chance; 4 give 0.057): among them what the plot's tolerance let pass."""
    claim = shipped_claims()[name]
    bound = next(c["bound"] for c in claim["checks"] if c["metric"].endswith("curve_excess"))
    final = next(c for c in claim["checks"] if c["metric"] == f"{name}.final_loss")
    printed = [float(v) for v in re.findall(r"\b0\.\d{3}\b", claim["printed"])]
    en = printed[0]
    assert len(printed) == 3 and claim["printed"].startswith(f"EN loss: {en:.3f}")
    low, high = min(printed) - 0.0005, max(printed) + 0.0005
    assert final["kind"] == "typical" and final["editions"] == len(printed)
    assert (final["low"], final["high"]) == pytest.approx((low, high))
    assert f"{low:.4f} to {high:.4f}" in " ".join(claim["statement"].split())

    def rows(q1, q3, least=None, most=None, runs=20, excess=0.0, nearest=None):
        spread = (q1, q3, q1 if least is None else least, q3 if most is None else most, runs)
        return [
            metric(f"{name}.final_loss", (q1 + q3) / 2),
            *(metric(f"{name}.final_loss_{p}", v) for p, v in zip(RUN_SPREAD, spread)),
            metric(f"{name}.scratch_vs_torch_gap", 0.0),
            metric(f"{name}.curve_excess", excess),
            metric(f"{name}.curve_excess_nearest_seed", excess if nearest is None else nearest),
        ]

    for inside in (high - 0.0002, low + 0.0002):
        assert verdict_of(name, rows(inside, inside)) == claims.REPRODUCED
    # A middle half that reaches into the window from above or below.
    assert verdict_of(name, rows(high - 0.0001, high + 0.003)) == claims.REPRODUCED
    assert verdict_of(name, rows(low - 0.003, low + 0.0001)) == claims.REPRODUCED
    middle = (low + high) / 2
    assert verdict_of(name, rows(middle, middle, excess=bound + 0.001)) == claims.NOT_REPRODUCED
    # The book's curve beyond the seeds' middle half, but within the bound of the nearest seed.
    nearer = rows(middle, middle, excess=bound + 0.001, nearest=bound - 0.001)
    assert verdict_of(name, nearer) == claims.INCONCLUSIVE
    for beyond in (high + 0.0003, low - 0.0003):
        assert verdict_of(name, rows(beyond, beyond)) == claims.NOT_REPRODUCED
        assert verdict_of(name, rows(beyond, beyond, runs=5)) == claims.NOT_REPRODUCED
        assert verdict_of(name, rows(beyond, beyond, runs=4)) == claims.INCONCLUSIVE
    if en + bound - 0.0005 > high:
        # What the plot's tolerance accepted (EN's final loss plus the largest EN-ZH gap).
        accepted = en + bound - 0.0005
        assert verdict_of(name, rows(accepted, accepted)) == claims.NOT_REPRODUCED
    # A middle half beyond the window whose lowest or highest seed reaches into it.
    above = rows(high + 0.001, high + 0.002, least=high - 0.0001)
    below = rows(low - 0.002, low - 0.001, most=low + 0.0001)
    assert verdict_of(name, above) == verdict_of(name, below) == claims.INCONCLUSIVE


@pytest.mark.parametrize("name", ["adagrad.concise", "rmsprop.concise", "adam.concise"])
def test_concise_gap_is_judged_at_the_plots_edition_gap(airfoil_data, monkeypatch, name):
    """The bound on the scratch-vs-torch.optim gap is the plot's largest EN–ZH gap, which the
    real pair passes; a torch.optim counterpart built with torch's defaults (the setting's
    hyper-parameters not passed) parts from the scratch optimizer by more."""
    claim = next(c for s in claims.load()["sections"] for c in s["claims"] if c["id"] == name)
    check = next(c for c in claim["checks"] if c["metric"].endswith("scratch_vs_torch_gap"))
    assert check["bound"] == pytest.approx(reference.edition_gap(BOOK, name, "loss"))
    setting = CONFIG["settings"][name]

    def rows():
        gap = airfoil_compare.compare_implementation(
            name, setting, airfoil_data, 2, 10, 200, seed=0
        )
        en = float(claim["printed"].split()[2])
        return gap + [
            metric(f"{name}.final_loss", en),
            *(metric(f"{name}.final_loss_{p}", v) for p, v in zip(RUN_SPREAD, [en] * 4 + [20])),
            metric(f"{name}.curve_excess", 0.0),
            metric(f"{name}.curve_excess_nearest_seed", 0.0),
        ]

    assert verdict_of(name, rows()) == claims.REPRODUCED
    optimizer = optimizers.OPTIMIZERS[setting["optimizer"]]
    trainer = type(
        optimizer.concise([torch.zeros(1, requires_grad=True)], airfoil.hyper_of(setting))
    )
    monkeypatch.setitem(
        optimizers.OPTIMIZERS,
        setting["optimizer"],
        optimizers.Optimizer(optimizer.rule, optimizer.state, lambda ps, h: trainer(ps)),
    )
    assert verdict_of(name, rows()) == claims.NOT_REPRODUCED


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"nesterov": True}, id="nesterov"),
        pytest.param({"dampening": 0.01}, id="dampening-0.01"),
        pytest.param({"weight_decay": 1e-4}, id="weight-decay-1e-4"),
    ],
)
def test_torch_momentum_is_the_books_step_for_step(airfoil_data, monkeypatch, changed):
    """Beyond the book, torch.optim.SGD's momentum is the scratch momentum to float32 rounding;
    one term changed parts them beyond 1e-6."""
    claim, setting = "momentum.concise.same_algorithm", CONFIG["settings"]["momentum.concise"]

    def rows():
        return airfoil_compare.compare_implementation(
            "momentum.concise", setting, airfoil_data, 2, 10, 200, seed=0
        )

    assert verdict_of(claim, rows()) == claims.REPRODUCED
    with_concise(
        monkeypatch,
        "sgd_momentum",
        lambda ps, h: torch.optim.SGD(ps, lr=h["lr"], momentum=h["momentum"], **changed),
    )
    assert verdict_of(claim, rows()) == claims.NOT_REPRODUCED


def adagrad_mutant(monkeypatch, accumulate, root=torch.sqrt):
    """The from-scratch Adagrad with ``accumulate(s, g)`` in place of s += g² and ``root`` in
    place of the square root of its step."""

    def rule(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
        s = accumulate(state["s"], g)
        p.sub_(hyper["lr"] * g / root(s + eps))

    adagrad = optimizers.OPTIMIZERS["adagrad"]
    monkeypatch.setitem(
        optimizers.OPTIMIZERS, "adagrad", optimizers.Optimizer(rule, adagrad.state, adagrad.concise)
    )


@pytest.mark.parametrize(
    "accumulate, root",
    [
        pytest.param(lambda s, g: s.copy_(g**2), torch.sqrt, id="s-keeps-only-the-last-g2"),
        pytest.param(lambda s, g: s.add_(g.abs()), torch.sqrt, id="s-sums-abs-g"),
        pytest.param(lambda s, g: s.add_(g**2), lambda x: x, id="step-without-sqrt"),
        pytest.param(lambda s, g: s + g**2, torch.sqrt, id="s-rebound-not-accumulated"),
        pytest.param(lambda s, g: s.mul_(0.9).add_(g**2), torch.sqrt, id="s-leaks-like-rmsprop"),
    ],
)
def test_adagrad_effective_lr_follows_the_accumulation(airfoil_data, monkeypatch, accumulate, root):
    """Adagrad's state and steps match the gradients it was fed, recorded apart from it: an
    accumulator that keeps only the last g² (whose effective lr still decays about as t^-1/2
    on this run), sums |g|, forgets, is not kept, or a step without the square root does not."""
    claim, setting = "adagrad.effective_lr", ["adagrad.scratch_lr0.1"]
    assert verdict_of(claim, summary(airfoil_data, setting)) == claims.REPRODUCED
    adagrad_mutant(monkeypatch, accumulate, root)
    assert verdict_of(claim, summary(airfoil_data, setting)) == claims.NOT_REPRODUCED


def effective_lr_rows(state_gap=1e-6, step_gap=1e-5, slope=-0.45):
    run = "adagrad.scratch_lr0.1"
    return [
        metric(f"{run}.state_gap", state_gap),
        metric(f"{run}.step_gap", step_gap),
        metric(f"{run}.eff_lr_slope", slope),
    ]


def test_adagrad_effective_lr_reads_each_of_its_bounds():
    claim = "adagrad.effective_lr"
    assert verdict_of(claim, effective_lr_rows()) == claims.REPRODUCED
    assert verdict_of(claim, effective_lr_rows(state_gap=9e-4, step_gap=9e-4)) == claims.REPRODUCED
    for rows in (
        effective_lr_rows(state_gap=2e-3),  # sₜ is not the sum of the squared gradients
        effective_lr_rows(step_gap=2e-3),  # the step is not η g / √(Σ g² + ε)
        effective_lr_rows(slope=-0.35),  # the effective lr decays slower than t^-1/2
        effective_lr_rows(slope=-0.65),
    ):
        assert verdict_of(claim, rows) == claims.NOT_REPRODUCED


def adadelta_gap_at(airfoil_data, monkeypatch, eps=None) -> list[dict]:
    """adadelta.concise.eps's evidence as airfoil_compare measures it: the gap between the
    scratch and the torch.optim Adadelta at the epoch of ``gap_at`` (0.8) over the seeds, with
    torch.optim's ``eps`` (its own, 1e-6, where None)."""
    if eps is not None:
        adadelta = optimizers.OPTIMIZERS["adadelta"]
        monkeypatch.setitem(
            optimizers.OPTIMIZERS,
            "adadelta",
            optimizers.Optimizer(
                adadelta.rule,
                adadelta.state,
                lambda ps, h: torch.optim.Adadelta(ps, rho=h["rho"], eps=eps),
            ),
        )
    name = "adadelta.concise"
    setting, at = CONFIG["settings"][name], CONFIG["gap_at"][name]
    return airfoil_compare.compare_at_epoch(
        name, setting, airfoil_data, 2, 10, 200, CONFIG["seeds"], at
    )


def test_adadelta_concise_eps_follows_the_eps(airfoil_data, monkeypatch):
    """torch.optim.Adadelta with the book's eps (1e-5) is the book's Adadelta: no gap, so the
    claim that eps alone parts the curves is not reproduced. At its own eps (1e-6) the gap
    lies at the bound, within the seeds' spread (see the next test): never "not reproduced"."""
    claim = "adadelta.concise.eps"
    assert verdict_of(claim, adadelta_gap_at(airfoil_data, monkeypatch)) in (
        claims.REPRODUCED,
        claims.INCONCLUSIVE,
    )
    same_eps = adadelta_gap_at(airfoil_data, monkeypatch, eps=1e-5)
    assert same_eps[0]["value"] < 1e-4  # the same algorithm from one start
    assert verdict_of(claim, same_eps) == claims.NOT_REPRODUCED


def leaky(rho, average, x):
    """The book's leaky average: ρ weighs the old average, 1 − ρ the new term."""
    return rho * average + (1 - rho) * x


def swapped_leaky(rho, average, x):
    """ρ on the wrong term: 1 − ρ weighs the old average, ρ the new term."""
    return leaky(1 - rho, average, x)


def adadelta_mutant(monkeypatch, s_leak=leaky, delta_leak=leaky, root=None):
    """The from-scratch Adadelta with one piece replaced: ``s_leak(ρ, s, g²)`` and
    ``delta_leak(ρ, Δx, g′²)`` for its two leaky averages, ``root(x, ε)`` for √(x + ε)."""
    root = root or (lambda x, eps: torch.sqrt(x + eps))

    def rule(p, g, state, hyper, eps=1e-5):
        rho, s, delta = hyper["rho"], state["s"], state["delta"]
        s.copy_(s_leak(rho, s, g**2))
        rescaled = root(delta, eps) / root(s, eps) * g
        p.sub_(rescaled)
        delta.copy_(delta_leak(rho, delta, rescaled**2))

    with_rule(monkeypatch, "adadelta", rule)


def yogi_mutant(monkeypatch, change):
    """The from-scratch Yogi with ``change(s, g², β2)`` as the step of s."""

    def rule(p, g, state, hyper, eps=1e-3):
        beta1, beta2, v, s, t = 0.9, 0.999, state["v"], state["s"], state["t"]
        v.copy_(beta1 * v + (1 - beta1) * g)
        s.add_(change(s, g**2, beta2))
        v_hat, s_hat = v / (1 - beta1**t), s / (1 - beta2**t)
        p.sub_(hyper["lr"] * v_hat / (torch.sqrt(s_hat) + eps))
        state["t"] = t + 1

    with_rule(monkeypatch, "yogi", rule)


# Each claim on an update rule, the settings whose audits it reads, and the small plausible
# mutations of the rule that must fail it.
RULE_MUTATIONS = {
    "adadelta.averages": (
        ["adadelta.scratch", "adadelta.concise"],
        {
            "rho-on-the-new-g2": partial(adadelta_mutant, s_leak=swapped_leaky),
            "rho-on-the-new-step": partial(adadelta_mutant, delta_leak=swapped_leaky),
            "eps-outside-the-roots": partial(
                adadelta_mutant, root=lambda x, eps: torch.sqrt(x) + eps
            ),
            "the-other-eps": adadelta_eps,
        },
    ),
    "adam.bias_correction": (
        ["adam.scratch_lr0.01", "adam.concise"],
        {"no-bias-correction": adam_without_bias_correction, "betas-swapped": adam_betas_swapped},
    ),
    "adam.yogi_update": (
        ["adam.yogi"],
        {
            "sign-flipped": partial(
                yogi_mutant, change=lambda s, g2, b2: (1 - b2) * torch.sign(s - g2) * g2
            ),
            "adams-update": partial(yogi_mutant, change=lambda s, g2, b2: (1 - b2) * (g2 - s)),
            "no-bias-correction": adam_without_bias_correction,
        },
    ),
}


@pytest.mark.parametrize("claim", sorted(RULE_MUTATIONS))
def test_each_rule_claim_reads_the_real_optimizers_as_reproduced(airfoil_data, claim):
    settings, _ = RULE_MUTATIONS[claim]
    assert verdict_of(claim, summary(airfoil_data, settings)) == claims.REPRODUCED


@pytest.mark.parametrize(
    "claim, mutation",
    [(claim, mutation) for claim, (_, found) in RULE_MUTATIONS.items() for mutation in found],
)
def test_each_rule_claim_fails_its_mutations(airfoil_data, monkeypatch, claim, mutation):
    settings, found = RULE_MUTATIONS[claim]
    found[mutation](monkeypatch)
    assert verdict_of(claim, summary(airfoil_data, settings)) == claims.NOT_REPRODUCED


def test_each_rule_claim_reads_each_of_its_bounds():
    """Each gap passes just inside its bound and fails just beyond it."""
    for claim in RULE_MUTATIONS:
        checks = shipped_claims()[claim]["checks"]
        inside = [metric(c["metric"], 0.9 * c["bound"]) for c in checks]
        assert verdict_of(claim, inside) == claims.REPRODUCED
        for i, check in enumerate(checks):
            beyond = inside[:i] + [metric(check["metric"], 1.1 * check["bound"])] + inside[i + 1 :]
            assert verdict_of(claim, beyond) == claims.NOT_REPRODUCED, check["metric"]


def books_adadelta_gaps(edition: str) -> pd.Series:
    """The concise curve less the scratch one in ``edition``'s Adadelta plots, at the epochs
    where both are on the chart."""
    concise, scratch = (
        reference.curve(BOOK, name, "loss").set_index(["edition", "epoch"])["value"][edition]
        for name in ("adadelta.concise", "adadelta.scratch")
    )
    return (concise - scratch).dropna()


def test_adadelta_eps_gap_is_judged_against_the_books_own_gap(airfoil_data, monkeypatch):
    """The bound is EN's gap between its scratch and concise curves where both first lie on
    the chart (0.096 at 0.8 epoch), less the most by which EN's and ZH's gaps differ (0.012).
    torch.optim.Adadelta at its own eps (1e-6) parts from the scratch one by more; at 2e-6,
    nearer the book's 1e-5, it parts by 0.07, more than the 0.01 once asked, less than the
    book's curves do."""
    claim = "adadelta.concise.eps"
    (check,) = shipped_claims()[claim]["checks"]
    en, zh = books_adadelta_gaps("en-1.0.3"), books_adadelta_gaps("zh-2.0.0")
    assert en.index[0] == pytest.approx(0.8) and en.iloc[0] == pytest.approx(0.096)
    assert check["bound"] == round(en.iloc[0] - (en - zh).abs().max(), 3) == 0.084

    def gap_at(eps):
        return adadelta_gap_at(airfoil_data, monkeypatch, eps)

    # The check reads the gap at the epoch the derivation is about, over the seeds.
    assert CONFIG["gap_at"] == {"adadelta.concise": 0.8}
    key = "adadelta.concise.scratch_vs_torch_gap_at_0.8"
    assert check["metric"] == key and check["spread"] == {key: f"{key}_iqr"}
    torchs = gap_at(1e-6)
    # On the five seeds the real pair parts by 0.084 at 0.8 epoch (IQR 0.010): the bound lies
    # inside the seeds' spread, so the claim reads inconclusive, never "not reproduced".
    assert verdict_of(claim, torchs) in (claims.REPRODUCED, claims.INCONCLUSIVE)
    median, spread = torchs
    for gap, verdict in ((0.085, claims.REPRODUCED), (0.083, claims.NOT_REPRODUCED)):
        assert verdict_of(claim, [median | {"value": gap}, spread | {"value": 0.0}]) == verdict
    # A median above the bound whose seeds' IQR reaches below it is within the noise.
    noisy = [median | {"value": 0.09}, spread | {"value": 0.02}]
    assert verdict_of(claim, noisy) == claims.INCONCLUSIVE
    nearer = gap_at(2e-6)
    assert 0.01 < nearer[0]["value"] < check["bound"]
    assert verdict_of(claim, nearer) == claims.NOT_REPRODUCED


def timing_rows(slowest, fastest, spread=1e-5):
    """The slowest and fastest settings' sec/epoch, each with an IQR over seeds of ``spread``
    (by default one small enough to leave ZH's 1.417 under 1.42 at its ends)."""
    return [
        metric("airfoil.slowest_sec_per_epoch", slowest),
        metric("airfoil.fastest_sec_per_epoch", fastest),
        metric("airfoil.slowest_sec_per_epoch_iqr", spread),
        metric("airfoil.fastest_sec_per_epoch_iqr", spread),
    ]


def test_sec_per_epoch_is_judged_against_the_editions_that_agree(airfoil_data, monkeypatch):
    """A claim beyond the book, its bound ZH's printed extremes (1.42; CL's are 1.31): both
    those editions pass, EN's scattered run (2.29) does not; a gap that holds only at the
    medians is inconclusive, and so is any ratio of times with no measured spread."""
    claim = "data.train_ch11.sec_per_epoch"
    assert shipped_claims()[claim]["claimed_by"] == "beyond_book"
    check = shipped_claims()[claim]["checks"][0]
    assert check["bound"] == pytest.approx(0.017 / 0.012, abs=0.005)
    assert verdict_of(claim, timing_rows(0.017, 0.012)) == claims.REPRODUCED  # the book's ZH
    assert verdict_of(claim, timing_rows(0.017, 0.013)) == claims.REPRODUCED  # the book's CL
    assert verdict_of(claim, timing_rows(0.245, 0.107)) == claims.NOT_REPRODUCED  # the book's EN
    assert verdict_of(claim, timing_rows(0.0175, 0.0115)) == claims.NOT_REPRODUCED
    assert verdict_of(claim, timing_rows(0.14, 0.1, spread=0.01)) == claims.INCONCLUSIVE
    single = judged(claim, timing_rows(0.017, 0.012, spread=0.0))  # one timing of each
    assert single["verdict"] == claims.INCONCLUSIVE
    assert single["reason"].startswith(claims.NO_SPREAD)
    # Two settings that run the same code at the same cost: about the same time. In the
    # workflow one process trains every setting after the others' first calls; here a first
    # run warms it up for both (else the first setting alone pays for the first calls).
    names = ["momentum.lr0.02_m0.5", "momentum.lr0.005_m0.9"]
    # Noise only ever adds time: of three tries, the quieter one stands for the code.
    summary(airfoil_data, names)
    for _ in range(3):
        rows, others = timed_alone(lambda: summary(airfoil_data, names))
        judgement = judged(claim, rows)
        if judgement["verdict"] == claims.REPRODUCED:
            break
    verdict, measured = judgement["verdict"], judgement["measured"]
    skip_if_shared(verdict, claims.REPRODUCED, others, f"same code, same cost: {measured}")
    assert verdict == claims.REPRODUCED, measured
    # Settings timed on two hosts are not compared.
    hosts = iter(["node1", "node2"] * len(CONFIG["seeds"]))
    with monkeypatch.context() as m:
        m.setattr(airfoil.socket, "gethostname", lambda: next(hosts))
        assert verdict_of(claim, summary(airfoil_data, names)) == claims.NOT_APPLICABLE
    # One setting's loop steps on half its minibatch (a batch size off by a factor of 2): twice
    # the steps per epoch, about twice the time of its twin.
    train = airfoil.train_airfoil

    def halved_at_lr002(optimizer, hyper, *args, batch_size=10, **kw):
        batch = batch_size // 2 if hyper.get("lr") == 0.02 else batch_size
        return train(optimizer, hyper, *args, batch_size=batch, **kw)

    monkeypatch.setattr(airfoil, "train_airfoil", halved_at_lr002)
    broken = verdict_of(claim, summary(airfoil_data, names))
    assert broken in (claims.NOT_REPRODUCED, claims.INCONCLUSIVE)  # noise may reach the bound


def adagrad_by_coordinate(p, g, state, hyper, eps=optimizers.ADAGRAD_EPS):
    """Adagrad's rule written out one coordinate at a time in Python: the same numbers, more
    work per step than the loss and its derivative."""
    s, flat_p, flat_g = state["s"].view(-1), p.view(-1), g.view(-1)
    for i in range(flat_p.numel()):
        s[i] += flat_g[i] ** 2
        flat_p[i] -= hyper["lr"] * flat_g[i] / (s[i] + eps).sqrt()


def step_cost(airfoil_data):
    return airfoil.step_cost(airfoil_data, CONFIG["step_cost"], CONFIG["batch_size"], 0)


def test_adagrad_cost_is_judged_against_the_books_spread_of_times(airfoil_data, monkeypatch):
    """adagrad.cost: the implemented Adagrad step costs about SGD's. Mutation: the update done
    coordinate by coordinate, which costs over twice SGD's step, is not reproduced."""
    claim = "adagrad.cost"
    check = shipped_claims()[claim]["checks"][0]
    assert check["bound"] == pytest.approx(0.017 / 0.012, abs=0.005)  # ZH's printed extremes

    def rows(ratio, spread):
        return [
            metric("adagrad.step_over_sgd", ratio, "x"),
            metric("adagrad.step_over_sgd_iqr", spread, "x"),
        ]

    assert verdict_of(claim, rows(1.1, 0.1)) == claims.REPRODUCED
    assert verdict_of(claim, rows(1.6, 0.1)) == claims.NOT_REPRODUCED
    assert verdict_of(claim, rows(1.4, 0.1)) == claims.INCONCLUSIVE
    measured, others = timed_alone(lambda: step_cost(airfoil_data))
    judgement = judged(claim, measured)
    skip_if_shared(judgement["verdict"], claims.REPRODUCED, others, judgement["measured"])
    assert judgement["verdict"] == claims.REPRODUCED, judgement["measured"]
    with_rule(monkeypatch, "adagrad", adagrad_by_coordinate)
    broken = judged(claim, step_cost(airfoil_data))
    assert broken["verdict"] == claims.NOT_REPRODUCED, broken["measured"]
