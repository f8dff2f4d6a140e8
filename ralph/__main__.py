"""``python -m ralph``: the same as the ``ralph`` command."""

from ralph.cli.main import main

if __name__ == "__main__":
    main()
