"""Configuration: typed schemas, composition of ``configs/`` and validation."""
