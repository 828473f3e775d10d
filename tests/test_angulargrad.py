"""AngularGrad against a per-element reference in plain floats, on a quadratic, and through state_dict."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from dlcomm.train.angulargrad import AngularGrad

# Fixed gradients for three steps on four elements. They cover a decreasing angle, an angle that
# grows again after a small one (so the tracked minimum differs from the current angle), a sign
# change with 1 + g_prev * g < 0, and a repeated gradient (angle 0).
GRADS = [
    [0.5, -1.0, 2.0, 0.3],
    [0.4, 1.5, -1.0, 0.3],
    [0.1, -2.0, 0.7, 0.3],
]
START = [1.0, -0.5, 0.25, 2.0]


def reference(method: str, lr: float, betas: tuple[float, float], eps: float, wd: float) -> list[float]:
    """The paper's equations, element by element, in Python floats."""
    beta1, beta2 = betas
    theta = list(START)
    n = len(theta)
    m, v, g_prev = [0.0] * n, [0.0] * n, [0.0] * n
    a_min = [math.pi / 2] * n
    for t, fixed in enumerate(GRADS, start=1):
        for i in range(n):
            g = fixed[i] + wd * theta[i]
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            angle = math.atan(abs((g_prev[i] - g) / (1 + g_prev[i] * g)))
            a_min[i] = min(a_min[i], angle)
            xi = math.cos(a_min[i]) if method == "cos" else math.tan(a_min[i])
            phi = 0.5 * math.tanh(abs(xi)) + 0.5
            m_hat = m[i] / (1 - beta1**t)
            v_hat = v[i] / (1 - beta2**t)
            theta[i] -= lr * phi * m_hat / (math.sqrt(v_hat) + eps)
            g_prev[i] = g
    return theta


@pytest.mark.parametrize("method", ["cos", "tan"])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_three_steps_match_per_element_reference(method: str, wd: float) -> None:
    lr, betas, eps = 0.1, (0.8, 0.95), 1e-3  # non-default values so eps and the betas matter
    x = torch.tensor(START, dtype=torch.float64, requires_grad=True)
    opt = AngularGrad([x], lr=lr, betas=betas, eps=eps, weight_decay=wd, method=method)
    for fixed in GRADS:
        x.grad = torch.tensor(fixed, dtype=torch.float64)
        opt.step()
    expected = torch.tensor(reference(method, lr, betas, eps, wd), dtype=torch.float64)
    torch.testing.assert_close(x.detach(), expected, rtol=0.0, atol=1e-7)
    # The gradient given by the caller is not modified (weight decay is applied to a copy).
    assert x.grad.tolist() == GRADS[-1]


def test_methods_differ_from_each_other_and_from_adam() -> None:
    """Guards the reference test against a coefficient that does not depend on the angle."""
    finals = {}
    for name in ("cos", "tan", "adam"):
        x = torch.tensor(START, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([x], lr=0.1) if name == "adam" else AngularGrad([x], lr=0.1, method=name)
        for fixed in GRADS:
            x.grad = torch.tensor(fixed, dtype=torch.float64)
            opt.step()
        finals[name] = x.detach().clone()
    assert not torch.allclose(finals["cos"], finals["tan"], atol=1e-4)
    assert not torch.allclose(finals["cos"], finals["adam"], atol=1e-4)


def quadratic() -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tensor(
        [[2.0, -1.0, 0.0], [0.5, 1.0, 1.0], [0.0, 1.0, 3.0], [1.0, 0.0, -1.0], [1.0, 2.0, 0.5]],
        dtype=torch.float64,
    )
    b = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64)
    return a, b


@pytest.mark.parametrize("method", ["cos", "tan"])
def test_reduces_convex_quadratic(method: str) -> None:
    a, b = quadratic()
    x = torch.tensor([3.0, -3.0, 2.0], dtype=torch.float64, requires_grad=True)
    x_star = torch.linalg.lstsq(a, b.unsqueeze(1)).solution.squeeze(1)
    f_star = float(((a @ x_star - b) ** 2).sum())

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = ((a @ x - b) ** 2).sum()
        loss.backward()
        return loss

    opt = AngularGrad([x], lr=0.1, method=method)
    gap0 = float(closure().detach()) - f_star
    for _ in range(200):
        opt.step(closure)
    gap = float(((a @ x.detach() - b) ** 2).sum()) - f_star
    assert gap0 > 10.0
    assert gap < 1e-6 * gap0, (gap0, gap)


def run(opt: AngularGrad, x: torch.Tensor, steps: int) -> None:
    a, b = quadratic()
    for _ in range(steps):
        opt.zero_grad()
        ((a @ x - b) ** 2).sum().backward()
        opt.step()


@pytest.mark.parametrize("method", ["cos", "tan"])
def test_state_dict_round_trip(method: str) -> None:
    x = torch.tensor([3.0, -3.0, 2.0], dtype=torch.float64, requires_grad=True)
    opt = AngularGrad([x], lr=0.05, betas=(0.8, 0.99), weight_decay=0.01, method=method)
    run(opt, x, 5)

    y = x.detach().clone().requires_grad_(True)
    copy_opt = AngularGrad([y], method="cos" if method == "tan" else "tan")  # hyperparameters come from the state
    copy_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert copy_opt.param_groups[0]["method"] == method
    assert set(copy_opt.state[y]) == {"step", "exp_avg", "exp_avg_sq", "prev_grad", "min_angle"}

    run(opt, x, 3)
    run(copy_opt, y, 3)
    assert torch.equal(x.detach(), y.detach())

    # Without the loaded state the same three steps end elsewhere, so the comparison above has teeth.
    z = y.detach().clone().requires_grad_(True)
    fresh = AngularGrad([z], lr=0.05, betas=(0.8, 0.99), weight_decay=0.01, method=method)
    w = y.detach().clone().requires_grad_(True)
    loaded = AngularGrad([w])
    loaded.load_state_dict(copy.deepcopy(copy_opt.state_dict()))
    run(fresh, z, 3)
    run(loaded, w, 3)
    assert not torch.allclose(z.detach(), w.detach())


def test_params_without_grad_are_skipped_and_closure_loss_returned() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    unused = torch.tensor([5.0], requires_grad=True)
    opt = AngularGrad([x, unused], lr=0.1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (x**2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss.detach()) == pytest.approx(5.0)
    assert unused.tolist() == [5.0] and len(opt.state[unused]) == 0
    # First step: phi = 0.5 tanh(cos A_1) + 0.5 with A_1 = arctan|g_1|, and m_hat / sqrt(v_hat) = sign(g).
    for before, now in zip([1.0, 2.0], x.tolist()):
        phi = 0.5 * math.tanh(math.cos(math.atan(2 * before))) + 0.5
        assert now == pytest.approx(before - 0.1 * phi, abs=1e-6)


def test_unknown_method_raises() -> None:
    with pytest.raises(ValueError, match=r"'sin'.*cos, tan"):
        AngularGrad([torch.zeros(1, requires_grad=True)], method="sin")
