"""The controller: three Raft replicas owning the cluster state (see docs/ARCHITECTURE.md)."""
