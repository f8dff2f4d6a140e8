"""The trusted loop: engine, gates, story state, prompts, run directory, lock."""
