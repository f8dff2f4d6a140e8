"""Agent-side hooks: the stdlib client, the loop's socket server, answers, the per-user helper, wiring."""
