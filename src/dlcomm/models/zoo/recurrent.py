"""Recurrent networks over image rows (:mod:`dlcomm.models.recurrent`)."""

from dlcomm.config.schema import RecurrentConfig
from dlcomm.models.registry import Model, register


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
