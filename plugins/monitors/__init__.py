"""Agent-side monitors: context usage alerts, test-failure detection, activity log."""
