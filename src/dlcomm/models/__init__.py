"""Models: a registry of named architectures built from the ``model`` config group.

Every model is randomly initialised; nothing is ever downloaded.
"""

from dlcomm.models.check import check_model_fits
from dlcomm.models.registry import build_model, model_names

__all__ = ["build_model", "check_model_fits", "model_names"]
