"""Skip a test whose requirement is missing, or fail it where it must run (CI)."""

from __future__ import annotations

import os

import pytest

__all__ = ["must_run", "require"]


def must_run() -> bool:
    """True where missing requirements are failures: ``CI=true`` or ``RALPH_REQUIRE_REAL=1``."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("RALPH_REQUIRE_REAL", "") == "1"


def require(condition: bool, reason: str) -> None:
    """Continue when ``condition`` holds; otherwise skip the test (or fail it under :func:`must_run`)."""
    if condition:
        return
    if must_run():
        pytest.fail(f"required for this test (CI / RALPH_REQUIRE_REAL): {reason}", pytrace=False)
    pytest.skip(reason)
