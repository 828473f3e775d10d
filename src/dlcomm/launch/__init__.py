"""Launchers start the ranks: ``launcher=<name>`` is the class registered in ``<name>.py``
(:mod:`~dlcomm.launch.registry`, interface in :mod:`~dlcomm.launch.base`); ``rank`` is what every
rank runs, whichever launcher started it."""
