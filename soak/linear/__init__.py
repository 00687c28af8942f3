"""Linearizability of the soak's client history: a checker (Wing & Gong, Lowe), its models, reports."""
