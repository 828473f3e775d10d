"""AngularGrad: Adam with a first moment scaled by the angle between consecutive gradients.

S. K. Roy, M. E. Paoletti, J. M. Haut, S. R. Dubey, P. Kar, A. Plaza, B. B. Chaudhuri,
"AngularGrad: A New Optimization Technique for Angular Convergence of Convolutional Neural
Networks", arXiv:2105.10190, 2021.

Per element of a parameter ``theta`` (every operation below is elementwise; ``t = 1, 2, ...``,
with ``g_0 = 0``, ``m_0 = v_0 = 0`` and ``A_min,0 = pi / 2``, the largest possible angle)::

    g_t      = grad f(theta_{t-1}) + weight_decay * theta_{t-1}        (coupled L2, as Adam)
    m_t      = beta1 * m_{t-1} + (1 - beta1) * g_t
    v_t      = beta2 * v_{t-1} + (1 - beta2) * g_t ** 2
    A_t      = arctan(|(g_{t-1} - g_t) / (1 + g_{t-1} * g_t)|)            (angle in [0, pi/2])
    A_min,t  = min(A_min,t-1, A_t)                                       (smallest angle so far)
    xi_t     = cos(A_min,t)   for method="cos",   tan(A_min,t)   for method="tan"
    phi_t    = 0.5 * tanh(|xi_t|) + 0.5                                  (angular coefficient)
    theta_t  = theta_{t-1} - lr * phi_t * m_hat_t / (sqrt(v_hat_t) + eps)

with the bias corrections ``m_hat_t = m_t / (1 - beta1 ** t)`` and ``v_hat_t = v_t / (1 - beta2 ** t)``.
``A_t`` is the angle between two lines of slopes ``g_{t-1}`` and ``g_t``; when ``1 + g_{t-1} g_t``
is zero the ratio is infinite and ``A_t = pi / 2``. So ``phi_t`` lies in ``[0.5, 0.5 + tanh(1)/2]``
(about ``[0.5, 0.881]``) for ``cos`` and in ``[0.5, 1]`` for ``tan``; with ``phi_t = 1`` the update
would be exactly ``torch.optim.Adam``'s.

The authors' code (github.com/mhaut/AngularGrad, ``angulargrad/cosangulargrad.py`` and
``angulargrad/tanangulargrad.py``) ships the two variants as two classes; its README example
uses the cosine one, which is why ``method="cos"`` is the default here. That code differs from
the per-element equations above in two places, and this module follows the equations: (1)
instead of a per-element minimum it replaces the stored angles of a whole tensor with the
current ones only when most of the tensor's elements have an angle not above the stored one,
and since it starts the stored angle at 0 that happens only when most gradients repeat exactly,
so its coefficient typically stays at its initial 0.5; (2) it adds ``eps`` to ``sqrt(v_t)``
before bias correction rather than to ``sqrt(v_hat_t)``.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, overload

import torch

METHODS = ("cos", "tan")


class AngularGrad(torch.optim.Optimizer):
    """AngularGrad (cosine or tangent variant); see the module docstring for the update."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        method: str = "cos",
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown AngularGrad method {method!r}; allowed: {', '.join(METHODS)}")
        if lr < 0.0:
            raise ValueError(f"invalid learning rate {lr}")
        if eps < 0.0:
            raise ValueError(f"invalid eps {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}; each must lie in [0, 1)")
        if weight_decay < 0.0:
            raise ValueError(f"invalid weight_decay {weight_decay}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, method=method)
        super().__init__(params, defaults)

    @overload  # torch.optim.Optimizer.step's
    def step(self, closure: None = None) -> None: ...
    @overload
    def step(self, closure: Callable[[], float]) -> float: ...
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AngularGrad does not support sparse gradients")
                grad = p.grad
                if group["weight_decay"] != 0.0:
                    grad = grad.add(p, alpha=group["weight_decay"])

                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["prev_grad"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["min_angle"] = torch.full_like(p, math.pi / 2, memory_format=torch.preserve_format)

                state["step"] += 1
                t = state["step"].item()
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                prev_grad, min_angle = state["prev_grad"], state["min_angle"]

                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

                angle = torch.atan(((prev_grad - grad) / (1 + prev_grad * grad)).abs())
                torch.minimum(min_angle, angle, out=min_angle)
                prev_grad.copy_(grad)
                xi = torch.cos(min_angle) if group["method"] == "cos" else torch.tan(min_angle)
                phi = torch.tanh(xi.abs()).mul_(0.5).add_(0.5)

                bias_correction1 = 1 - beta1**t
                bias_correction2 = 1 - beta2**t
                denom = (exp_avg_sq / bias_correction2).sqrt_().add_(group["eps"])
                p.addcdiv_(exp_avg * phi, denom, value=-group["lr"] / bias_correction1)

        return loss
