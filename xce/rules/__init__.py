"""Rules shared by the controller's apply and the scheduler: pure, no I/O."""
