"""Runs after the fact: which RUNNING runs are lost (``lost``) and closing them (``reap``,
``dlcomm runs reap``). Above both ``launch`` (which launcher closes a run, and the SLURM
queue) and ``tracking`` (the store); ``report`` names the lost runs through it."""
