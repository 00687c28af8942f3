"""A cluster's name as the gateway's clusters file and a key's scope give it (gateway/clusters/)."""

RULE = "1 to 64 letters, digits, '_', '-' or '.'"


def valid(name: str) -> bool:
    return 0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-.") for c in name)
