"""A deterministic whole-cluster simulation of XCE's protocol (requirement H6).

The real state machine (controller.fsm.apply over MemoryTables), the real
Sync stream reads (controller.sync_stream), the real worker session
(controller.worker_session), the real scheduler view and core
(scheduler.view, scheduler.core) and the real worker daemon and executor
(worker.daemon, worker.executor) run in one process, stepped by a seeded
scheduler through the actions of tla/XceBarrier.tla, on a simulated network
(network.py), replicated log (raft.py) and operating system (worker_node.py).

    python -m tests.protocol_sim --seeds 200 --steps 600   # a long exploration
"""
