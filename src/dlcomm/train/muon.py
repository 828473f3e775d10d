"""``optim=muon``: torch's Muon on the hidden weight matrices, torch's AdamW on every other parameter,
presented to the rest of dlcomm as one ``torch.optim.Optimizer``.

dlcomm's loop, schedules and checkpoints hold one optimizer: the schedule sets ``group["lr"]`` on
``optimizer.param_groups``, a checkpoint is ``optimizer.state_dict()``, :mod:`dlcomm.train.precision`
calls ``optimizer.step()``. :class:`MuonWithAdamW` is that one optimizer: a
``torch.optim.Optimizer`` whose ``param_groups`` are the very group dicts of a
``torch.optim.Muon`` and a ``torch.optim.AdamW`` (each tagged ``rule: muon | adamw``), whose
``state`` both of them share (their parameters are disjoint), and whose ``step`` steps both. The
update rules are torch's own; nothing of Muon is written here.

Which parameter follows which rule (:func:`split_for_muon`), per parameter group in parameter
order: a 2-D parameter goes to Muon, except the group's first and last parameter of two or more
dimensions (the input layer or embedding and the output head: Keller Jordan's Muon README, "Other
parameters, such as embeddings, classifier heads, and hidden gains/biases should be optimized using
standard AdamW"), unless ``io_layers`` puts those on Muon too. Everything else (biases, norms,
and convolution filters, which ``torch.optim.Muon`` refuses: it takes 2-D parameters only) is
AdamW's. docs/algorithms.md (``muloco``) says why and where this departs from the references.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch


def split_for_muon(params: Iterable[torch.Tensor], io_layers: bool) -> tuple[list, list]:
    """``(muon, adamw)``: the parameters of one group by the rule of the module docstring, in order."""
    params = list(params)
    matrices = [p for p in params if p.ndim >= 2]
    ends = set() if io_layers or not matrices else {id(matrices[0]), id(matrices[-1])}
    muon = [p for p in params if p.ndim == 2 and id(p) not in ends]
    chosen = {id(p) for p in muon}
    return muon, [p for p in params if id(p) not in chosen]


class MuonWithAdamW(torch.optim.Optimizer):
    """``torch.optim.Muon(muon_groups, **muon)`` and ``torch.optim.AdamW(adamw_groups, **adamw)`` as
    one optimizer (the module docstring). A part without parameters is left out."""

    def __init__(
        self,
        muon_groups: list[dict[str, Any]],
        adamw_groups: list[dict[str, Any]],
        muon: dict[str, Any],
        adamw: dict[str, Any],
    ) -> None:
        muon_groups = [g for g in muon_groups if g["params"]]
        adamw_groups = [g for g in adamw_groups if g["params"]]
        self.parts: dict[str, torch.optim.Optimizer] = {}
        if muon_groups:
            self.parts["muon"] = torch.optim.Muon(muon_groups, **muon)
        if adamw_groups:
            self.parts["adamw"] = torch.optim.AdamW(adamw_groups, **adamw)
        groups = []
        for rule, part in self.parts.items():
            for group in part.param_groups:
                group["rule"] = rule
                groups.append(group)
        super().__init__(groups, {})  # the same group dicts: a schedule's lr reaches the part that steps
        self._share()

    def _share(self) -> None:
        """Point every part at this optimizer's groups (by their ``rule``) and state."""
        for rule, part in self.parts.items():
            part.param_groups = [g for g in self.param_groups if g["rule"] == rule]
            part.state = self.state

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts.values():
            part.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading (which replaces the group dicts and the state), then the parts re-pointed."""
        super().load_state_dict(state_dict)
        self._share()
