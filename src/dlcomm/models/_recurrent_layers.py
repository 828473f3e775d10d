"""The networks of model=rnn, lstm, gru (an ``nn.Module`` subclass, so torch at import:
:mod:`dlcomm.models.recurrent` imports this module inside its builders).

Recurrent classifiers over image rows (the node-based paper's Table II): ``rnn``, ``lstm``, ``gru``.

A batch ``x`` of shape ``(B, C, H, W)`` is read as a sequence of ``T = H`` steps, the image rows
top to bottom; step ``t`` is row ``t`` of every channel, ``x_t = x[:, :, t, :]`` flattened to
``C*W`` features (channel-major), so the sequence has shape ``(B, H, C*W)``. One recurrent
layer of ``n = cfg.hidden_size`` units (``torch.nn.RNN`` / ``LSTM`` / ``GRU``, ``batch_first``,
zero initial state) runs over it:

    rnn:  h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)
    lstm: (h_t, c_t) = LSTM(x_t, h_{t-1}, c_{t-1})      (input, forget, cell, output gates)
    gru:  h_t = GRU(x_t, h_{t-1})                        (reset, update gates)

and only the last output ``h_T`` (shape ``(B, n)``) is classified:

    BatchNorm1d(n) -> Dropout(0.25) -> Linear(n, 32) -> ReLU -> Dropout(0.5) -> Linear(32, K)

giving logits ``(B, K)``: Table II's "(Simple / LSTM / GRU) + BN + DP(0.25)" feature layers and
"FC(32) + DP(0.5) + FC(10)" classifier (with ``K`` classes from the dataset). The BatchNorm's
running statistics are buffers of the model state. PyTorch's default initialisation.
"""

from __future__ import annotations

from typing import Literal, Tuple

import torch
from torch import nn

FEATURE_DROPOUT = 0.25  # after BatchNorm, Table II's DP(0.25)
CLASSIFIER_WIDTH = 32  # Table II's FC(32)
CLASSIFIER_DROPOUT = 0.5  # Table II's DP(0.5)


class RowRecurrentClassifier(nn.Module):
    """``recurrent`` over the rows of a ``(B, C, H, W)`` batch, then the Table II head on ``h_T``."""

    def __init__(self, recurrent: nn.RNNBase, num_classes: int) -> None:
        super().__init__()
        hidden = recurrent.hidden_size
        self.recurrent = recurrent
        self.head = nn.Sequential(
            nn.BatchNorm1d(hidden),
            nn.Dropout(FEATURE_DROPOUT),
            nn.Linear(hidden, CLASSIFIER_WIDTH),
            nn.ReLU(inplace=True),
            nn.Dropout(CLASSIFIER_DROPOUT),
            nn.Linear(CLASSIFIER_WIDTH, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> sequence ``(B, H, C*W)`` -> outputs ``(B, H, n)`` -> logits ``(B, K)``."""
        b, c, h, w = x.shape
        rows = x.permute(0, 2, 1, 3).reshape(b, h, c * w)
        outputs, _ = self.recurrent(rows)
        return self.head(outputs[:, -1])


def row_classifier(
    kind: Literal["RNN", "LSTM", "GRU"], hidden_size: int, input_shape: Tuple[int, int, int], num_classes: int
) -> nn.Module:
    """``torch.nn.<kind>`` of ``hidden_size`` units over the rows of ``input_shape`` images, then the head."""
    c, _, w = input_shape
    if hidden_size < 1:
        raise ValueError(f"hidden_size={hidden_size} must be positive")
    layer = {"RNN": nn.RNN, "LSTM": nn.LSTM, "GRU": nn.GRU}[kind]
    return RowRecurrentClassifier(layer(input_size=c * w, hidden_size=hidden_size, batch_first=True), num_classes)
