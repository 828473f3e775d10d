"""model=rnn, lstm, gru: recurrent classifiers over image rows (the node-based paper's Table II).

Their ``Config``, classes and builders; the network (an ``nn.Module`` subclass, so torch at import)
and its equations are in :mod:`dlcomm.models._recurrent_layers`, imported inside the builders:
composing a configuration imports this module without torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Tuple

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register

if TYPE_CHECKING:
    from torch import nn


@dataclass
class RecurrentConfig(ModelConfig):
    """rnn (simple, tanh), lstm, gru over image rows (H steps of C*W features), then BN + DP(0.25) +
    FC(32) + DP(0.5) + FC(classes), as in the node-based paper's Table II."""

    hidden_size: int = field(default=128, metadata=domain(low=1, doc="units of the recurrent layer"))


def build_rnn(cfg: RecurrentConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """Simple (Elman, tanh) RNN over image rows; see :mod:`dlcomm.models._recurrent_layers`."""
    from dlcomm.models._recurrent_layers import row_classifier

    return row_classifier("RNN", int(cfg.hidden_size), input_shape, num_classes)


def build_lstm(cfg: RecurrentConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """LSTM over image rows; see :mod:`dlcomm.models._recurrent_layers`."""
    from dlcomm.models._recurrent_layers import row_classifier

    return row_classifier("LSTM", int(cfg.hidden_size), input_shape, num_classes)


def build_gru(cfg: RecurrentConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """GRU over image rows; see :mod:`dlcomm.models._recurrent_layers`."""
    from dlcomm.models._recurrent_layers import row_classifier

    return row_classifier("GRU", int(cfg.hidden_size), input_shape, num_classes)


@register
class RNN(Model[RecurrentConfig]):
    name = "rnn"
    Config = RecurrentConfig
    build = staticmethod(build_rnn)


@register
class LSTM(Model[RecurrentConfig]):
    name = "lstm"
    Config = RecurrentConfig
    build = staticmethod(build_lstm)


@register
class GRU(Model[RecurrentConfig]):
    name = "gru"
    Config = RecurrentConfig
    build = staticmethod(build_gru)
