"""The `xce` command line: a command table (table.py), its parser, one module per command family.

Nothing is imported here: `xce jobs` loads the table, the parser, the
session and the one family its command is in.
"""
