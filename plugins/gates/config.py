"""Config models of the default gates (imported only when config is loaded)."""

from __future__ import annotations

from pydantic import Field

from ralph.api import ConfigSection
from ralph.api.testintegrity import TRUSTED_TREE_LINKS


class VerifyConfig(ConfigSection):
    """``[tool.ralph.verify]``: the test gate running the task list's verifyCommands."""

    soft_timeout: float = Field(300.0, gt=0, description="seconds before a warning")
    hard_timeout: float = Field(600.0, gt=0, description="seconds before the commands are killed")


class QualityConfig(ConfigSection):
    """``[tool.ralph.quality]``: the optional quality review (soft gate)."""

    enabled: bool = False
    soft_timeout: float = Field(120.0, gt=0)
    hard_timeout: float = Field(180.0, gt=0)
    prompt: str | None = Field(None, description="path to a custom quality-review prompt")


class SpecConfig(ConfigSection):
    """``[tool.ralph.spec]``: the spec gate (an independent reviewer's structured verdict, hard)."""

    enabled: bool | None = Field(None, description="default: on under skip-review, off under review")
    agent: str | None = Field(None, description="agent plugin of the reviewer (default: the review agent)")
    model: str | None = Field(None, description="model of the reviewer (default: the agent's own)")
    soft_timeout: float = Field(180.0, gt=0, description="seconds before a warning (seed 002: 3 min)")
    hard_timeout: float = Field(300.0, gt=0, description="seconds before the reviewer is stopped (seed 002: 5 min)")
    prompt: str | None = Field(None, description="path to a custom spec-review prompt (same placeholders)")


class TestIntegrityConfig(ConfigSection):
    """``[tool.ralph.test-integrity]``: the tests as they were at story start decide (docs/tests.md)."""

    __test__ = False  # not a pytest test class

    enabled: bool = Field(True, description="check the tests after every implement and review-fix iteration")
    defaults: bool = Field(True, description="the language-aware test paths and test configuration files")
    test_paths: list[str] = Field(default_factory=list, description="more test paths (a/dir/, name pattern, path glob)")
    config_files: list[str] = Field(default_factory=list, description="more whole-file test configuration")
    not_test_paths: list[str] = Field(default_factory=list, description="paths that are not tests despite a default")
    findings: bool = Field(True, description="a new skip, a removed assertion or test, a process exit fail the gate")
    link: list[str] = Field(
        default_factory=lambda: list(TRUSTED_TREE_LINKS),
        description="ignored top-level directories linked into the trusted tree (dependencies, tools)",
    )
    soft_timeout: float | None = Field(None, gt=0, description="seconds before a warning (default: [verify]'s)")
    hard_timeout: float | None = Field(None, gt=0, description="seconds before the commands are killed (default: [verify]'s)")


class DiffCoverageConfig(ConfigSection):
    """``[tool.ralph.diff-coverage]``: the share of the story's changed Python lines its tests run (off by default)."""

    minimum: float | None = Field(None, ge=0, le=100, description="percent of changed statements to cover (unset: off)")
    command: str = Field("python3 -m coverage run -m pytest -q -p no:cacheprovider",
                         description="the tests under coverage.py (COVERAGE_FILE and COVERAGE_RCFILE, the story-start "
                                     "configuration without exclusions, are set outside the project)")
    report: str = Field("python3 -m coverage json -q -o /dev/stdout", description="coverage.py's JSON report on stdout")
    soft_timeout: float = Field(300.0, gt=0, description="seconds before a warning")
    hard_timeout: float = Field(600.0, gt=0, description="seconds before the commands are killed")
