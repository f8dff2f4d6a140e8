"""Helpers of the ``docker-sandbox`` runner: naming, config, image building, engine.

Only :mod:`.engine` and :mod:`.image` import the docker SDK, and only when used.
"""
