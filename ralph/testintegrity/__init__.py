"""Test integrity: the tests that exist when a story starts are part of its spec (docs/tests.md).

- :mod:`~ralph.testintegrity.paths`: which files are tests and test configuration (language-aware
  defaults, plus config), whole files or sections of a file;
- :mod:`~ralph.testintegrity.sections`: the test sections of a shared file (``pyproject.toml``,
  ``setup.cfg``, ``package.json``, ``Cargo.toml``) put back as they were, the rest kept;
- :mod:`~ralph.testintegrity.findings`: deterministic findings in the diff of the tests (a new skip,
  a removed assertion or test, a process exit), each naming its file and line;
- :mod:`~ralph.testintegrity.export`: the trusted tree: the agent's code with the tests and the test
  configuration as they were at story start, built by hardened git in a directory the loop made;
- :mod:`~ralph.testintegrity.check`: what the ``test-integrity`` gate does with them.

Public through :mod:`ralph.api.testintegrity`.
"""
