"""`python -m starter …`: the command line (see starter/cli.py)."""

from starter.cli import main

if __name__ == "__main__":
    main()
