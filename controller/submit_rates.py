"""How fast each user may submit: the leader's token buckets (`[auth] submit_rate_per_user`).

Theory of operation. Each user has a bucket of `burst` jobs that refills at `rate_per_s` jobs a
second; a submit takes as many jobs as it carries (an array: its elements) or is refused with how
long until it would fit. One larger than the whole burst is taken when the bucket is full (the
bucket goes below empty, and refills from there). A full bucket is the same as none, so users
whose buckets have refilled are forgotten once more than `max_users` are tracked: the memory is
bounded by the users that submitted in the last burst/rate seconds. The buckets are the leader's
alone (a new leader starts them full), like Slurm's RPC rate limit in slurmctld; apply knows
nothing of them.

Pure: the caller passes the time.
"""

from __future__ import annotations


class SubmitRates:
    def __init__(self, rate_per_s: float, burst: float, max_users: int = 10_000) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_users = max_users
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (jobs left, at when)

    def take(self, user: str, jobs: int, now_s: float) -> float:
        """0.0 if `user` may submit `jobs` now (and they are taken), else the seconds until it may."""
        if self.rate_per_s <= 0:
            return 0.0
        left = self._left(user, now_s)
        if jobs > left and left < self.burst:  # (more than a whole burst goes when the bucket is full)
            missing = min(jobs, self.burst) - left
            return max(missing / self.rate_per_s, 0.001)
        if len(self._buckets) >= self.max_users and user not in self._buckets:
            self._forget_full(now_s)
        self._buckets[user] = (left - jobs, now_s)
        return 0.0

    def _left(self, user: str, now_s: float) -> float:
        known = self._buckets.get(user)
        if known is None:
            return self.burst
        left, when = known
        return min(self.burst, left + max(0.0, now_s - when) * self.rate_per_s)

    def _forget_full(self, now_s: float) -> None:
        for user in [u for u in self._buckets if self._left(u, now_s) >= self.burst]:
            del self._buckets[user]
