"""The leader: its logic without I/O, inputs in, effects out (core.py has the theory of operation).

- core: the role (a leadership per term led), tick, the inputs a driver feeds;
- effects: what the core asks its driver to do;
- settings: what it is given, and the ports it reads the world through;
- leadership: what one leadership keeps, a record per concern;
- context: what the parts share (effects, proposals, the entry format);
- writes, job_writes: client writes; workers: worker streams and sessions;
- membership: announcements and membership changes; upkeep: the configuration
  push, the host watchdog and load commits.
"""

from controller.leader.core import CATCH_UP_POLL_S, LeaderCore
from controller.leader.effects import (
    AskPeers,
    ChangeRaft,
    Effect,
    EndStream,
    Propose,
    Reply,
    Send,
    TransferLeadership,
)
from controller.leader.leadership import Leadership
from controller.leader.settings import CAPABILITY_POLL_S, Consensus, LeaderSettings, StateReader
from controller.leader.upkeep import config_current
from controller.leader.workers import SESSION_STEPS_PER_TURN
from controller.leader.writes import MAX_DECISIONS, SCOPED_METHODS

__all__ = [
    "CAPABILITY_POLL_S",
    "CATCH_UP_POLL_S",
    "MAX_DECISIONS",
    "SCOPED_METHODS",
    "SESSION_STEPS_PER_TURN",
    "AskPeers",
    "ChangeRaft",
    "Consensus",
    "Effect",
    "EndStream",
    "LeaderCore",
    "LeaderSettings",
    "Leadership",
    "Propose",
    "Reply",
    "Send",
    "StateReader",
    "TransferLeadership",
    "config_current",
]
