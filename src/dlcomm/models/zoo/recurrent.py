"""Recurrent networks over image rows (:mod:`dlcomm.models.recurrent`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register


@dataclass
class RecurrentConfig(ModelConfig):
    """rnn (simple, tanh), lstm, gru over image rows (H steps of C*W features), then BN + DP(0.25) +
    FC(32) + DP(0.5) + FC(classes), as in the node-based paper's Table II."""

    hidden_size: int = field(default=128, metadata=domain(low=1))  # units of the recurrent layer


@register
class RNN(Model):
    name = "rnn"
    Config = RecurrentConfig
    builder = "dlcomm.models.recurrent:build_rnn"


@register
class LSTM(Model):
    name = "lstm"
    Config = RecurrentConfig
    builder = "dlcomm.models.recurrent:build_lstm"


@register
class GRU(Model):
    name = "gru"
    Config = RecurrentConfig
    builder = "dlcomm.models.recurrent:build_gru"
