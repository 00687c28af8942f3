"""Operating a cluster: init, a local cluster of real processes, the demo."""
