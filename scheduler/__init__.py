"""The scheduler daemon: follows the state, picks jobs and hosts, sends its decisions back.

docs/architecture/scheduling.md tells how.
"""
