"""The simulation mode (issue 18): recordings re-run, workloads simulated, what-ifs."""
