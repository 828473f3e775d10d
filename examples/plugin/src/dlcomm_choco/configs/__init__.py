"""The plugin's preset YAML files, laid out as ``dlcomm/configs``: the ``dlcomm.configs`` entry
point puts this package on Hydra's search path. None is needed for ``algo=choco``: dlcomm stores
the choice from :class:`dlcomm_choco.choco.ChocoConfig`. A file here is a preset: a network preset
(``network/<name>.yaml``), or ``algo/<name>.yaml`` for a registered choice whose values it changes
(``defaults: [<name>_schema, _self_]``, then those values), which then wins over the stored one."""
