"""Launchers start the ranks; ``rank`` is what every rank runs, whichever launcher started it."""
