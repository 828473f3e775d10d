"""Communication algorithms: one small file each, registered by name (see ``registry``)."""
