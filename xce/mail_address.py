"""Job mail addresses (bsub -u): what apply accepts at submit and a worker gives its sendmail.

An address is an argument of the site's sendmail, so it may be nothing sendmail would read as an
option or that a header could be split at: a user name or user@domain, of letters, digits and a few
marks, never starting with "-".
"""

from __future__ import annotations

MAX_LENGTH = 256


def valid(address: str) -> bool:
    local, at, domain = address.partition("@")
    return 0 < len(address) <= MAX_LENGTH and not address.startswith("-") and bool(local) and \
        all(c.isascii() and (c.isalnum() or c in "._%+=-") for c in local) and \
        (not at or (bool(domain) and all(c.isascii() and (c.isalnum() or c in ".-") for c in domain)))
