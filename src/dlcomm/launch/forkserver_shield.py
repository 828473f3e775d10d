"""Imported first by the fork server (:mod:`dlcomm.launch.procstart`): it ignores SIGINT from here on.

A terminal's Ctrl-C goes to the whole foreground process group, the fork server included.
multiprocessing makes its server ignore SIGINT only after the preload; a server still importing torch
died of the Ctrl-C meant for the driver, and the rank being started failed with ``EOFError`` and a
traceback. Ranks ignore SIGINT themselves (Ctrl-C is the driver's to handle), so what they inherit
from the server is unchanged.
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
