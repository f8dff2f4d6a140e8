"""The plugin manager: hookspecs, entry points, registries."""
