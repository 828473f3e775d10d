"""The one door to the network: only this package (and the launcher) import torch.distributed."""
