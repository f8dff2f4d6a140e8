"""PreToolUse guards: dangerous shell commands, read-before-edit, protected files (see docs/guards.md)."""
