"""The example's tests use ralph's fixtures (opt-in: ralph.testing is a pytest plugin)."""

pytest_plugins = ["ralph.testing"]
