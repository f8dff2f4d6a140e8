"""The click command line (imports lazily: keep `ralph --help` fast)."""
