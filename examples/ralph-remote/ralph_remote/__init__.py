"""ralph-remote: an example runner whose agent runs on another machine (see README.md).

Imports nothing: ``ralph --help`` and the agent host import only what they use.
"""
