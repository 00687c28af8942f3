"""Text from users, as a terminal may show it: control characters escaped.

A job name or command is whatever its submitter wrote. Printed raw, a name
like "evil\\x1b[31m" would colour (or retitle, or worse) the terminal of the
operator who lists the jobs; `shown` escapes every control and format
character (\\x1b, \\r, the bidirectional overrides) the way Python writes them.
"""

from __future__ import annotations


def shown(text: str) -> str:
    if text.isprintable():
        return text
    import unicodedata  # only for text that needs it: a command line starts faster without

    return "".join(c if c.isprintable() and unicodedata.category(c) != "Cf" else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
