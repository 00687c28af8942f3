"""`python -m cli ...`: the `xce` program."""

from cli.main import entry

if __name__ == "__main__":
    entry()
