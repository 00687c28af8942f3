"""The simulation mode: recordings re-run, workloads simulated, what-ifs."""
