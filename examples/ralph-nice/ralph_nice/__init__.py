"""ralph-nice: run the agent as a host subprocess at a lower CPU priority (``nice -n``).

The plugin is :mod:`ralph_nice.plugin` (the ``ralph`` entry point), its command
``ralph nice`` is :mod:`ralph_nice.commands`.  This package imports nothing:
``ralph --help`` imports the command's module, and with it this file, for the
command's help line.
"""
