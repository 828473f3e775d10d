"""What a rank process imports, imported once by the fork server (:mod:`dlcomm.launch.procstart`).

Importing this module is its whole job: every rank forked from the server then starts with these
modules loaded. Besides the training stack it covers what ranks would otherwise import lazily on
their own: ``torch._dynamo`` (``torch.optim`` loads it on the first optimizer's construction, ~1 s of
CPU per rank here), every algorithm module (the registry's discovery) and MLflow (rank 0's reporter).
"""

import mlflow  # noqa: F401
import torch._dynamo  # noqa: F401

import dlcomm.launch.harness  # noqa: F401
import dlcomm.launch.rank  # noqa: F401
import dlcomm.tracking.reporter  # noqa: F401
from dlcomm.algorithms.registry import ALGORITHMS

ALGORITHMS.all()
