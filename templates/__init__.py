"""Files ``ralph init`` writes, the Claude Code plugin bundle and the sandbox recipe."""
