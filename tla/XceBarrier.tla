----------------------------- MODULE XceBarrier -----------------------------
(***************************************************************************)
(* XCE's commit barrier, resync and reconnect protocol (requirement H6; the *)
(* evidence behind C3, H3, H4 and M3).                                     *)
(*                                                                         *)
(* The controller replicas are abstracted to one replicated log: `log` is *)
(* the current leader's log, `commit` its committed prefix.  Entries past *)
(* `commit` may be lost when the leader crashes (Raft keeps every         *)
(* committed entry and maybe some of the others).  `st` is the committed  *)
(* state, the result of applying log[1..commit] in order; `hist[i]` is the *)
(* state after entry i (a history variable, for ViewConsistent and the    *)
(* "no effect" invariants).  Everything a process holds in memory is lost *)
(* when it crashes; the log, the committed state and the workers'        *)
(* journals are durable.                                                  *)
(*                                                                         *)
(* Streams between processes are FIFO and lose messages only by breaking  *)
(* (HTTP/2 over TCP); unary calls (decision batches) stay in `rpc` and    *)
(* may be delivered late, in any order, and more than once.                *)
(*                                                                         *)
(* Each action and invariant below has a counterpart in the test suite;   *)
(* tla/README.md maps them and tests/tla/test_tla_mapping.py checks the map.*)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Jobs,         \* job ids
    Hosts,        \* host names (one worker each)
    Schedulers,   \* scheduler processes
    Cap,          \* slots per host; a job takes one slot on each host of its allocation
    Wide,         \* the jobs that span two hosts (a parallel job: one slot on each)
    Gpu,          \* the jobs that reserve one GPU on each host of their allocation (rusage[gpu=1])
    GCap,         \* GPUs per host: a consumable the barrier re-checks like slots
    None,         \* a model value: no host, no scheduler
    Low,          \* the jobs of a preemptable queue; the others are of a queue that may preempt them
    MaxTerm,      \* bounds that keep the model finite for TLC
    MaxLog

ASSUME Cap \in Nat \ {0} /\ GCap \in Nat /\ Wide \subseteq Jobs /\ Gpu \subseteq Jobs /\ Low \subseteq Jobs
       /\ MaxTerm \in Nat /\ MaxLog \in Nat

VARIABLES
    log,        \* the leader's log: <<[term, op]>>
    commit,     \* the committed prefix: log[1..commit]; also the revision of `st`
    term,       \* the current term
    leaderUp,   \* a leader is elected and alive
    ready,      \* the index of the no-op of the leader's term (it serves once that commits); 0: none
    st,         \* the committed state: jobs, hosts, scheduler lease
    hist,       \* history: hist[i] is the committed state after entry i
    acked,      \* jobs whose submission the client saw acknowledged
    floor,      \* the events table holds the events of revisions floor..commit
    view,       \* view[s]: scheduler s's view of jobs and hosts at revision view[s].rev
    sync,       \* sync[s]: Sync messages in flight to s (a FIFO stream)
    syncPos,    \* syncPos[s]: the last revision the leader queued on s's stream; -1: none open
    belief,     \* belief[s]: the lease epoch s believes it holds; 0: none
    rpc,        \* decision batches sent and not lost (a set: late, reordered, repeated)
    inst,       \* live job instances: [job, attempt, host]
    journal,    \* journal[h]: the <<job, attempt>> instances worker h ever accepted
    up,         \* up[h]: worker h's daemon runs
    conn,       \* conn[h]: the generation of h's open stream; 0: none
    joining,    \* joining[h]: the log index of h's join entry in flight; 0: none
    down,       \* down[h]: commands in flight to h (a FIFO stream)
    upq,        \* upq[h]: reports in flight from h
    unacked,    \* unacked[h]: reports h keeps until the leader acknowledges them
    known,      \* known[h]: <<job, attempt>> the leader's session believes h runs
    stopped,    \* <<job, attempt>> of the instances whose process group is stopped (SIGSTOP)
    halted      \* halted[h]: <<job, attempt>> the leader's session told h to stop

raftVars   == <<log, commit, term, leaderUp, ready>>
stateVars  == <<st, hist, acked>>
syncVars   == <<floor, view, sync, syncPos, belief>>
workerVars == <<inst, journal, up, conn, joining, down, upq, unacked, known, stopped, halted>>
vars       == <<raftVars, stateVars, syncVars, rpc, workerVars>>

-----------------------------------------------------------------------------
(* The committed state and how one entry changes it (controller/fsm/).     *)

\* STOPPING: preempted, its worker told to stop it, its slots still held; SSUSP: stopped, its slots
\* given back (controller/fsm/preempt.py: SSUSP, and SSUSP with `released`).
JobStates == {"none", "PEND", "RUN", "UNKWN", "DONE", "STOPPING", "SSUSP"}
Live == {"RUN", "UNKWN", "STOPPING", "SSUSP"}   \* an instance of the attempt may run
Halting == {"STOPPING", "SSUSP"}                \* its instance is to be stopped
NoJob  == [state |-> "none", attempt |-> 0, host |-> None, alloc |-> {}]
NoHost == [status |-> "none", gen |-> 0, used |-> 0, slots |-> 0, gused |-> 0, gpus |-> 0]

Span(j) == IF j \in Wide THEN 2 ELSE 1      \* hosts in the job's allocation
G(j)    == IF j \in Gpu THEN 1 ELSE 0       \* GPUs it reserves on each of them

\* The job's allocation gives back what it holds, on every one of its hosts (holdings.release).
Release(hosts, j, a) ==
    [h \in DOMAIN hosts |-> IF h \in a THEN [hosts[h] EXCEPT !.used = @ - 1, !.gused = @ - G(j)]
                                       ELSE hosts[h]]
Init0  == [jobs  |-> [j \in Jobs |-> NoJob],
           hosts |-> [h \in Hosts |-> NoHost],
           lease |-> [epoch |-> 0, holder |-> None]]

Hist(i) == IF i = 0 THEN Init0 ELSE hist[i]

Running(S, h) == {j \in Jobs : S.jobs[j].state \in Live /\ S.jobs[j].host = h}  \* its command

LeaseCurrent(S, op) == op.epoch = S.lease.epoch /\ op.sched = S.lease.holder

ApplySubmit(S, op) ==
    IF S.jobs[op.job].state = "none"
    THEN [S EXCEPT !.jobs[op.job] = [state |-> "PEND", attempt |-> 1, host |-> None, alloc |-> {}]]
    ELSE S   \* a retry under the same request id changes nothing

ApplyJoin(S, op) ==   \* updated in place, a new generation (M2)
    [S EXCEPT !.hosts[op.host] = [status |-> "OK", gen |-> @.gen + 1, used |-> @.used, slots |-> Cap,
                                  gused |-> @.gused, gpus |-> GCap]]

Fits(H, j, h) ==      \* one slot of j, and its GPUs, free on host h of H (committed or viewed)
    /\ H[h].status = "OK"
    /\ H[h].used < H[h].slots
    /\ H[h].gused + G(j) <= H[h].gpus

ApplyBatch(S, op) ==  \* the commit barrier: each decision re-checked against committed state; an
                      \* allocation (op.hosts, its first op.host running the command) all or nothing
    IF /\ LeaseCurrent(S, op)
       /\ S.jobs[op.job].state = "SSUSP"   \* a suspended victim resumes: its own allocation, if it fits
       /\ S.jobs[op.job].attempt = op.attempt
       /\ op.hosts = S.jobs[op.job].alloc /\ op.host = S.jobs[op.job].host
       /\ \A h \in op.hosts : Fits(S.hosts, op.job, h)
    THEN [S EXCEPT !.jobs[op.job].state = "RUN",
                   !.hosts = [h \in Hosts |-> IF h \in op.hosts
                                              THEN [S.hosts[h] EXCEPT !.used = @ + 1, !.gused = @ + G(op.job)]
                                              ELSE S.hosts[h]]]
    ELSE IF /\ LeaseCurrent(S, op)
       /\ S.jobs[op.job].state = "PEND"
       /\ S.jobs[op.job].attempt = op.attempt
       /\ Cardinality(op.hosts) = Span(op.job) /\ op.host \in op.hosts
       /\ \A h \in op.hosts : Fits(S.hosts, op.job, h)
    THEN [S EXCEPT !.jobs[op.job] = [state |-> "RUN", attempt |-> op.attempt, host |-> op.host,
                                     alloc |-> op.hosts],
                   !.hosts = [h \in Hosts |-> IF h \in op.hosts
                                              THEN [S.hosts[h] EXCEPT !.used = @ + 1, !.gused = @ + G(op.job)]
                                              ELSE S.hosts[h]]]
    ELSE S

Wanted(S, op) ==      \* a report about the current attempt, over the current connection
    /\ S.hosts[op.host].gen = op.gen
    /\ S.jobs[op.job].host = op.host
    /\ S.jobs[op.job].attempt = op.attempt
    /\ S.jobs[op.job].state \in Live

\* What an ending attempt gives back: nothing more if it was suspended (it gave its slots already).
Held(S, j) == IF S.jobs[j].state = "SSUSP" THEN {} ELSE S.jobs[j].alloc

ApplyReport(S, op) == \* only a failed dispatch or a lost instance re-queues (M3); a success never does
    IF ~Wanted(S, op) THEN S
    ELSE CASE op.kind = "started"  -> IF S.jobs[op.job].state = "UNKWN"
                                      THEN [S EXCEPT !.jobs[op.job].state = "RUN"] ELSE S
         []   op.kind = "suspended" -> \* its worker stopped it: a preempted job's slots are given back
                                      IF S.jobs[op.job].state = "STOPPING"
                                      THEN [S EXCEPT !.jobs[op.job].state = "SSUSP",
                                                     !.hosts = Release(S.hosts, op.job, S.jobs[op.job].alloc)]
                                      ELSE S
         []   op.kind = "finished" -> [S EXCEPT !.jobs[op.job] = [state |-> "DONE", attempt |-> op.attempt,
                                                                  host |-> None, alloc |-> {}],
                                             !.hosts = Release(S.hosts, op.job, Held(S, op.job))]
         []   op.kind \in {"failed", "lost", "fenced"} ->  \* "lost": it ended with no status (every job
                                                   \* here is rerunnable; fsm's settle_lost); "fenced":
                                                   \* its worker's fence killed it (reports.py)
                                      [S EXCEPT !.jobs[op.job] = [state |-> "PEND", attempt |-> op.attempt + 1,
                                                                  host |-> None, alloc |-> {}],
                                             !.hosts = Release(S.hosts, op.job, Held(S, op.job))]

ApplyPreempt(S, op) ==  \* PREEMPT: the victim, at its attempt, of lower priority and running, is to be
                        \* stopped; it keeps its slots until its worker says it stopped (preempt.py)
    IF /\ LeaseCurrent(S, op)
       /\ S.jobs[op.job].state = "PEND" /\ S.jobs[op.job].attempt = op.attempt /\ op.job \notin Low
       /\ op.victim \in Low /\ S.jobs[op.victim].state = "RUN" /\ S.jobs[op.victim].attempt = op.vattempt
    THEN [S EXCEPT !.jobs[op.victim].state = "STOPPING"]
    ELSE S

ApplyUnavail(S, op) ==  \* missed heartbeats: UNAVAIL, its jobs UNKWN, unless it re-joined meanwhile
    IF S.hosts[op.host].gen = op.gen /\ S.hosts[op.host].status = "OK"
    THEN [S EXCEPT !.hosts[op.host].status = "UNAVAIL",
                   !.jobs = [j \in Jobs |->
                                IF S.jobs[j].state = "RUN" /\ S.jobs[j].host = op.host
                                THEN [S.jobs[j] EXCEPT !.state = "UNKWN"]
                                ELSE S.jobs[j]]]
    ELSE S

Lost(S, h) == {j \in Jobs : S.jobs[j].state = "UNKWN" /\ S.jobs[j].host = h}

ApplyResolve(S, op) ==  \* unavailable past the second timeout: its UNKWN jobs are requeued, and
                        \* give back what they hold on every host of their allocation.  (A job
                        \* whose command runs on another host is killed by that host, which
                        \* reports its end: hosts.py _lose_part; here it runs on.)
    IF S.hosts[op.host].gen = op.gen /\ S.hosts[op.host].status = "UNAVAIL"
    THEN LET lost == Lost(S, op.host) IN
         [S EXCEPT !.jobs = [j \in Jobs |->
                                IF j \in lost
                                THEN [state |-> "PEND", attempt |-> S.jobs[j].attempt + 1, host |-> None,
                                      alloc |-> {}]
                                ELSE S.jobs[j]],
                   !.hosts = [h \in Hosts |->
                                [S.hosts[h] EXCEPT
                                    !.used = @ - Cardinality({j \in lost : h \in S.jobs[j].alloc}),
                                    !.gused = @ - Cardinality({j \in lost \cap Gpu : h \in S.jobs[j].alloc})]]]
    ELSE S

ApplyLease(S, op) ==    \* `expired` is what the proposer's stamp says of the current lease
    IF op.expired \/ S.lease.holder = None
    THEN [S EXCEPT !.lease = [epoch |-> S.lease.epoch + 1, holder |-> op.sched]]
    ELSE S              \* the holder renews (no change), anyone else is refused

ApplyOp(S, op) ==
    CASE op.type = "noop"    -> S
    []   op.type = "submit"  -> ApplySubmit(S, op)
    []   op.type = "join"    -> ApplyJoin(S, op)
    []   op.type = "batch"   -> ApplyBatch(S, op)
    []   op.type = "report"  -> ApplyReport(S, op)
    []   op.type = "unavail" -> ApplyUnavail(S, op)
    []   op.type = "resolve" -> ApplyResolve(S, op)
    []   op.type = "lease"   -> ApplyLease(S, op)
    []   op.type = "preempt" -> ApplyPreempt(S, op)

-----------------------------------------------------------------------------
(* Helpers.                                                                *)

Serving == leaderUp /\ commit >= ready   \* the no-op of its term applied
Room    == Len(log) < MaxLog

Propose(op) == log' = Append(log, [term |-> term, op |-> op])

Key(x) == <<x.job, x.attempt>>
EndKinds == {"finished", "lost", "fenced"}   \* how an instance's end is reported (WorkerFinish);
                                             \* "fenced": killed by its worker's fence, cut off from
                                             \* the leader for fence_s (worker/daemon.py)
Report(x, kind) == [job |-> x.job, attempt |-> x.attempt, kind |-> kind]

SessionCurrent(h) ==   \* worker_session._check_host: this stream is the host's current one
    /\ Serving
    /\ conn[h] # 0
    /\ st.hosts[h].gen = conn[h]
    /\ st.hosts[h].status = "OK"

WantedOn(h) == {<<j, st.jobs[j].attempt>> : j \in Running(st, h)}

ApplyEvent(v, r) ==    \* an event carries the records entry r changed; upserts by key
    [rev   |-> r,
     jobs  |-> [j \in Jobs |-> IF Hist(r).jobs[j] # Hist(r - 1).jobs[j] THEN Hist(r).jobs[j] ELSE v.jobs[j]],
     hosts |-> [h \in Hosts |-> IF Hist(r).hosts[h] # Hist(r - 1).hosts[h] THEN Hist(r).hosts[h] ELSE v.hosts[h]]]

EmptyView == [rev |-> 0, jobs |-> Init0.jobs, hosts |-> Init0.hosts]

CloseStream(h) ==      \* both ends learn; what was in flight is gone
    /\ conn' = [conn EXCEPT ![h] = 0]
    /\ down' = [down EXCEPT ![h] = << >>]
    /\ upq' = [upq EXCEPT ![h] = {}]
    /\ known' = [known EXCEPT ![h] = {}]
    /\ halted' = [halted EXCEPT ![h] = {}]

-----------------------------------------------------------------------------
Init ==
    /\ log = << >>
    /\ commit = 0
    /\ term = 0
    /\ leaderUp = FALSE
    /\ ready = 0
    /\ st = Init0
    /\ hist = << >>
    /\ acked = {}
    /\ floor = 1
    /\ view = [s \in Schedulers |-> EmptyView]
    /\ sync = [s \in Schedulers |-> << >>]
    /\ syncPos = [s \in Schedulers |-> -1]
    /\ belief = [s \in Schedulers |-> 0]
    /\ rpc = {}
    /\ inst = {}
    /\ journal = [h \in Hosts |-> {}]
    /\ up = [h \in Hosts |-> TRUE]
    /\ conn = [h \in Hosts |-> 0]
    /\ joining = [h \in Hosts |-> 0]
    /\ down = [h \in Hosts |-> << >>]
    /\ upq = [h \in Hosts |-> {}]
    /\ unacked = [h \in Hosts |-> {}]
    /\ known = [h \in Hosts |-> {}]
    /\ stopped = {}
    /\ halted = [h \in Hosts |-> {}]

-----------------------------------------------------------------------------
(* The replicated log and its leader.                                     *)

Submit ==              \* a client submits (or retries) job j; acknowledged once committed
    /\ Serving /\ Room
    /\ \E j \in Jobs \ acked : Propose([type |-> "submit", job |-> j])
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, workerVars>>

LeaderCrash ==         \* entries past the commit index may be lost; every stream to it ends
    /\ leaderUp
    /\ \E k \in commit..Len(log) : log' = SubSeq(log, 1, k)
    /\ leaderUp' = FALSE
    /\ ready' = 0                \* the leader's own: the next one sets it at election
    /\ conn' = [h \in Hosts |-> 0]
    /\ down' = [h \in Hosts |-> << >>]
    /\ upq' = [h \in Hosts |-> {}]
    /\ known' = [h \in Hosts |-> {}]
    /\ halted' = [h \in Hosts |-> {}]
    /\ joining' = [h \in Hosts |-> 0]
    /\ sync' = [s \in Schedulers |-> << >>]
    /\ syncPos' = [s \in Schedulers |-> -1]
    /\ UNCHANGED <<commit, term, stateVars, floor, view, belief, rpc, inst, journal, up, unacked, stopped>>

ElectLeader ==         \* a new term; the leader appends a no-op and serves once it commits
    /\ ~leaderUp /\ term < MaxTerm /\ Room
    /\ term' = term + 1
    /\ leaderUp' = TRUE
    /\ log' = Append(log, [term |-> term + 1, op |-> [type |-> "noop"]])
    /\ ready' = Len(log) + 1
    /\ UNCHANGED <<commit, stateVars, syncVars, rpc, workerVars>>

CommitApply ==         \* the next entry commits and applies; a submit is acknowledged
    /\ leaderUp /\ commit < Len(log)
    /\ LET op == log[commit + 1].op
           next == ApplyOp(st, op)
       IN /\ commit' = commit + 1
          /\ st' = next
          /\ hist' = Append(hist, next)
          /\ acked' = IF op.type = "submit" THEN acked \cup {op.job} ELSE acked
    /\ UNCHANGED <<log, term, leaderUp, ready, syncVars, rpc, workerVars>>

Compact ==             \* old events are dropped: the events floor moves up
    /\ floor < commit
    /\ \E f \in (floor + 1)..commit : floor' = f
    /\ UNCHANGED <<raftVars, stateVars, view, sync, syncPos, belief, rpc, workerVars>>

-----------------------------------------------------------------------------
(* The scheduler: lease, passes, decision batches.                        *)

LeaseTakeover ==       \* s asks for the lease; granted (new epoch) if the current one expired
    /\ Serving /\ Room
    /\ \E s \in Schedulers, expired \in BOOLEAN :
          Propose([type |-> "lease", sched |-> s, expired |-> expired])
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, workerVars>>

LeaseReply ==          \* s learns whether it holds the lease (the answer may arrive late)
    /\ Serving
    /\ \E s \in Schedulers :
          belief' = [belief EXCEPT ![s] = IF st.lease.holder = s THEN st.lease.epoch ELSE 0]
    /\ UNCHANGED <<raftVars, stateVars, floor, view, sync, syncPos, rpc, workerVars>>

SchedulerPass ==       \* from its view, maybe stale, with the epoch it believes it holds: an
                       \* allocation of Span(j) hosts that fit, one of them first
    /\ \E s \in Schedulers, j \in Jobs, hs \in SUBSET Hosts :
          /\ belief[s] > 0
          /\ view[s].jobs[j].state = "PEND"
          /\ Cardinality(hs) = Span(j)
          /\ \A h \in hs : Fits(view[s].hosts, j, h)
          /\ \E h \in hs :
                rpc' = rpc \cup {[type |-> "batch", epoch |-> belief[s], sched |-> s, job |-> j,
                                  attempt |-> view[s].jobs[j].attempt, host |-> h, hosts |-> hs]}
    /\ UNCHANGED <<raftVars, stateVars, syncVars, workerVars>>

ProposeBatch ==        \* the leader proposes a batch as one entry; nothing acts on it yet
    /\ Serving /\ Room
    /\ \E m \in rpc : Propose(m)
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, workerVars>>

SchedulerCrash ==      \* the view is not durable: a restarted scheduler starts empty
    /\ \E s \in Schedulers :
          /\ view' = [view EXCEPT ![s] = EmptyView]
          /\ belief' = [belief EXCEPT ![s] = 0]
          /\ sync' = [sync EXCEPT ![s] = << >>]
          /\ syncPos' = [syncPos EXCEPT ![s] = -1]
    /\ UNCHANGED <<raftVars, stateVars, floor, rpc, workerVars>>

-----------------------------------------------------------------------------
(* The Sync stream: events or a snapshot, then the live tail (H3).        *)

Resync ==              \* open a stream: events after the view's revision if kept, else a snapshot
    /\ Serving
    /\ \E s \in Schedulers :
          /\ syncPos[s] = -1
          /\ IF view[s].rev > 0 /\ view[s].rev + 1 >= floor
             THEN /\ syncPos' = [syncPos EXCEPT ![s] = view[s].rev]
                  /\ UNCHANGED sync
             ELSE /\ sync' = [sync EXCEPT ![s] = <<[kind |-> "snapshot", rev |-> commit]>>]
                  /\ syncPos' = [syncPos EXCEPT ![s] = commit]
    /\ UNCHANGED <<raftVars, stateVars, floor, view, belief, rpc, workerVars>>

SyncTail ==            \* the next event, or "resync required" once it was compacted
    /\ leaderUp
    /\ \E s \in Schedulers :
          /\ syncPos[s] # -1 /\ syncPos[s] < commit
          /\ IF syncPos[s] + 1 >= floor
             THEN /\ sync' = [sync EXCEPT ![s] = Append(@, [kind |-> "event", rev |-> syncPos[s] + 1])]
                  /\ syncPos' = [syncPos EXCEPT ![s] = @ + 1]
                  /\ UNCHANGED view
             ELSE /\ sync' = [sync EXCEPT ![s] = << >>]
                  /\ syncPos' = [syncPos EXCEPT ![s] = -1]
                  /\ view' = [view EXCEPT ![s].rev = 0]   \* the follower asks for a snapshot next
    /\ UNCHANGED <<raftVars, stateVars, floor, belief, rpc, workerVars>>

SyncRepeat ==          \* an event sent again (a catch-up read overlapping the live tail)
    /\ \E s \in Schedulers, r \in 1..commit :
          /\ syncPos[s] # -1 /\ r <= syncPos[s] /\ r >= floor /\ Len(sync[s]) < MaxLog
          /\ sync' = [sync EXCEPT ![s] = Append(@, [kind |-> "event", rev |-> r])]
    /\ UNCHANGED <<raftVars, stateVars, floor, view, syncPos, belief, rpc, workerVars>>

SyncDeliver ==         \* the view applies the next message: idempotent, never backwards
    /\ \E s \in Schedulers :
          /\ sync[s] # << >>
          /\ LET m == Head(sync[s]) IN
                view' = [view EXCEPT ![s] =
                            IF m.kind = "snapshot"
                            THEN [rev |-> m.rev, jobs |-> Hist(m.rev).jobs, hosts |-> Hist(m.rev).hosts]
                            ELSE IF m.rev <= @.rev THEN @    \* a repeat: skipped
                            ELSE ApplyEvent(@, m.rev)]
          /\ sync' = [sync EXCEPT ![s] = Tail(@)]
    /\ UNCHANGED <<raftVars, stateVars, floor, syncPos, belief, rpc, workerVars>>

-----------------------------------------------------------------------------
(* Workers: join, commands after commit, reports until acknowledged (H4). *)

WorkerRejoin ==        \* a worker (restarted if it crashed) connects and proposes its join
    /\ Serving /\ Room
    /\ \E h \in Hosts :
          /\ conn[h] = 0 /\ joining[h] = 0
          /\ up' = [up EXCEPT ![h] = TRUE]
          /\ Propose([type |-> "join", host |-> h])
          /\ joining' = [joining EXCEPT ![h] = Len(log) + 1]
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, inst, journal, conn,
                   down, upq, unacked, known, stopped, halted>>

Joined ==              \* the join committed: a stream at the new generation; the worker
                       \* re-reports what runs and every unacknowledged report
    /\ Serving
    /\ \E h \in Hosts :
          /\ joining[h] # 0 /\ joining[h] <= commit
          /\ log[joining[h]].op = [type |-> "join", host |-> h]
          /\ conn' = [conn EXCEPT ![h] = Hist(joining[h]).hosts[h].gen]
          /\ joining' = [joining EXCEPT ![h] = 0]
          /\ known' = [known EXCEPT ![h] = {}]
          /\ halted' = [halted EXCEPT ![h] = {}]
          /\ upq' = [upq EXCEPT ![h] = unacked[h] \cup {Report(x, "started") : x \in {y \in inst : y.host = h}}]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, down, unacked, stopped>>

SendRun ==             \* commit before send: RunJob only for a committed placement
    /\ \E h \in Hosts, j \in Jobs :
          /\ SessionCurrent(h)
          /\ j \in Running(st, h)
          /\ <<j, st.jobs[j].attempt>> \notin known[h]
          /\ down' = [down EXCEPT ![h] = Append(@, [type |-> "run", job |-> j, attempt |-> st.jobs[j].attempt,
                                                    stop |-> st.jobs[j].state \in Halting])]
          /\ known' = [known EXCEPT ![h] = @ \cup {<<j, st.jobs[j].attempt>>}]
          /\ halted' = IF st.jobs[j].state \in Halting
                       THEN [halted EXCEPT ![h] = @ \cup {<<j, st.jobs[j].attempt>>}] ELSE halted
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, upq, unacked, stopped>>

SendKill ==            \* an instance committed state no longer wants is killed
    /\ \E h \in Hosts :
          /\ SessionCurrent(h)
          /\ \E k \in known[h] \ WantedOn(h) :
                /\ down' = [down EXCEPT ![h] = Append(@, [type |-> "kill", job |-> k[1], attempt |-> k[2]])]
                /\ known' = [known EXCEPT ![h] = @ \ {k}]
                /\ halted' = [halted EXCEPT ![h] = @ \ {k}]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, upq, unacked, stopped>>

WorkerStart ==         \* at most one instance per (job, attempt): journaled before it starts
    /\ \E h \in Hosts :
          /\ up[h] /\ conn[h] # 0 /\ down[h] # << >>
          /\ Head(down[h]).type = "run"
          /\ LET m == Head(down[h])
                 x == [job |-> m.job, attempt |-> m.attempt, host |-> h]
             IN /\ down' = [down EXCEPT ![h] = Tail(@)]
                /\ IF Key(m) \in journal[h]
                   THEN /\ UNCHANGED <<inst, journal, unacked>>   \* a repeat: its reports again; stopped
                        /\ stopped' = IF x \notin inst THEN stopped    \* or continued as the RunJob says
                                      ELSE IF m.stop THEN stopped \cup {Key(m)} ELSE stopped \ {Key(m)}
                        /\ upq' = IF m.stop /\ x \in inst THEN [upq EXCEPT ![h] = @ \cup {Report(x, "suspended")}]
                                  ELSE upq
                   ELSE /\ journal' = [journal EXCEPT ![h] = @ \cup {Key(m)}]
                        /\ \E kind \in {"started", "failed"} :     \* "failed": refused (draining, M1)
                              /\ inst' = IF kind = "started" THEN inst \cup {x} ELSE inst
                              /\ stopped' = IF kind = "started" /\ m.stop THEN stopped \cup {Key(m)} ELSE stopped
                              /\ unacked' = [unacked EXCEPT ![h] = @ \cup {Report(x, kind)}]
                              /\ upq' = [upq EXCEPT ![h] = @ \cup {Report(x, kind)}
                                            \cup (IF kind = "started" /\ m.stop THEN {Report(x, "suspended")} ELSE {})]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, up, conn, joining, known, halted>>

WorkerSignal ==        \* a KILL ends the instance; its end is reported like any other
    /\ \E h \in Hosts :
          /\ up[h] /\ conn[h] # 0 /\ down[h] # << >>
          /\ Head(down[h]).type = "kill"
          /\ LET m == Head(down[h])
                 x == [job |-> m.job, attempt |-> m.attempt, host |-> h]
             IN /\ down' = [down EXCEPT ![h] = Tail(@)]
                /\ IF x \in inst
                   THEN /\ inst' = inst \ {x}
                        /\ stopped' = stopped \ {Key(x)}   \* a stopped job is continued to see its TERM
                        /\ unacked' = [unacked EXCEPT ![h] = @ \cup {Report(x, "finished")}]
                        /\ upq' = [upq EXCEPT ![h] = @ \cup {Report(x, "finished")}]
                   ELSE UNCHANGED <<inst, unacked, upq, stopped>>
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, journal, up, conn, joining, known, halted>>

WorkerFinish ==        \* an instance ends (its daemon may be down: the report waits in the journal);
                       \* "lost": no status was left and no daemon that started it saw the end
    /\ \E x \in inst, kind \in EndKinds :
          /\ Key(x) \in stopped => kind = "fenced"   \* a stopped process ends only by its worker's fence
          /\ inst' = inst \ {x}
          /\ stopped' = stopped \ {Key(x)}
          /\ unacked' = [unacked EXCEPT ![x.host] = @ \cup {Report(x, kind)}]
          /\ upq' = IF up[x.host] /\ conn[x.host] # 0
                    THEN [upq EXCEPT ![x.host] = @ \cup {Report(x, kind)}]
                    ELSE upq
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, journal, up, conn, joining, down, known, halted>>

RelayReport ==         \* the leader proposes a report with the generation of the stream it came on
    /\ Serving /\ Room
    /\ \E h \in Hosts : \E r \in upq[h] :
          /\ conn[h] # 0
          /\ Propose([type |-> "report", host |-> h, gen |-> conn[h], job |-> r.job,
                      attempt |-> r.attempt, kind |-> r.kind])
          /\ upq' = [upq EXCEPT ![h] = @ \ {r}]
          /\ known' = IF r.kind = "started" THEN [known EXCEPT ![h] = @ \cup {<<r.job, r.attempt>>}]
                      ELSE known
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, inst, journal, up, conn,
                   joining, down, unacked, stopped, halted>>

AckReport ==           \* acknowledged once a report of this stream committed: forgotten
    /\ \E h \in Hosts : \E r \in unacked[h] :
          /\ conn[h] # 0
          /\ \E i \in 1..commit :
                log[i].op = [type |-> "report", host |-> h, gen |-> conn[h], job |-> r.job,
                             attempt |-> r.attempt, kind |-> r.kind]
          /\ unacked' = [unacked EXCEPT ![h] = @ \ {r}]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, down, upq, known,
                   stopped, halted>>

WorkerCrash ==         \* the daemon dies (its jobs live on, in their own sessions), or the
                       \* whole machine does (they die too; reported from the journal later)
    /\ \E h \in Hosts, machine \in BOOLEAN :
          /\ up[h]
          /\ up' = [up EXCEPT ![h] = FALSE]
          /\ CloseStream(h)
          /\ joining' = [joining EXCEPT ![h] = 0]
          /\ IF machine
             THEN /\ inst' = {x \in inst : x.host # h}
                  /\ stopped' = stopped \ {Key(x) : x \in {y \in inst : y.host = h}}
                  /\ unacked' = [unacked EXCEPT ![h] = @ \cup {Report(x, "lost") : x \in {y \in inst : y.host = h}}]
             ELSE UNCHANGED <<inst, unacked, stopped>>
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, journal>>

HeartbeatTimeout ==    \* the leader proposes UNAVAIL for the generation it last committed;
                       \* maybe wrongly (a slow network), maybe while a re-join is in flight
    /\ Serving /\ Room
    /\ \E h \in Hosts :
          /\ st.hosts[h].status = "OK"
          /\ Propose([type |-> "unavail", host |-> h, gen |-> st.hosts[h].gen])
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, workerVars>>

ResolveHost ==         \* past unknown_timeout_s: requeue its UNKWN jobs.  Timing: by then its
                       \* instances are dead: the machine is down, or its worker fenced them
                       \* (WorkerFinish "fenced": fence_s + kill_grace_s < unknown_timeout_s,
                       \* refused otherwise when the configuration is loaded).
    /\ Serving /\ Room
    /\ \E h \in Hosts :
          /\ st.hosts[h].status = "UNAVAIL"
          /\ Lost(st, h) # {}
          /\ \A x \in inst : x.host # h
          /\ Propose([type |-> "resolve", host |-> h, gen |-> st.hosts[h].gen])
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, workerVars>>

WorkerStreamBreak ==
    /\ \E h \in Hosts : conn[h] # 0 /\ CloseStream(h)
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, joining, unacked, stopped>>

SyncStreamBreak ==
    /\ \E s \in Schedulers :
          /\ syncPos[s] # -1
          /\ sync' = [sync EXCEPT ![s] = << >>]
          /\ syncPos' = [syncPos EXCEPT ![s] = -1]
    /\ UNCHANGED <<raftVars, stateVars, floor, view, belief, rpc, workerVars>>

StreamBreak ==         \* a worker stream or a Sync stream breaks
    WorkerStreamBreak \/ SyncStreamBreak

-----------------------------------------------------------------------------
(* Preemption (scheduler/preemption.py, controller/fsm/preempt.py, the   *)
(* worker's stop and its report).  Its actions are not in Next: a model   *)
(* with preemptable jobs (Low) takes PreemptNext too (MCPreemptCI).       *)

SchedulerPreempt ==    \* from its view: a pending job of a preemptive queue takes a running job of
                       \* a preemptable one (one host each)
    /\ \E s \in Schedulers, j \in Jobs \ Low, v \in Low :
          /\ belief[s] > 0
          /\ view[s].jobs[j].state = "PEND" /\ view[s].jobs[v].state = "RUN"
          /\ rpc' = rpc \cup {[type |-> "preempt", epoch |-> belief[s], sched |-> s, job |-> j,
                               attempt |-> view[s].jobs[j].attempt, victim |-> v,
                               vattempt |-> view[s].jobs[v].attempt]}
    /\ UNCHANGED <<raftVars, stateVars, syncVars, workerVars>>

SchedulerResume ==     \* a suspended victim whose hosts have room again, by the view: its own allocation
    /\ \E s \in Schedulers, j \in Jobs :
          /\ belief[s] > 0
          /\ view[s].jobs[j].state = "SSUSP"
          /\ \A h \in view[s].jobs[j].alloc : Fits(view[s].hosts, j, h)
          /\ rpc' = rpc \cup {[type |-> "batch", epoch |-> belief[s], sched |-> s, job |-> j,
                               attempt |-> view[s].jobs[j].attempt, host |-> view[s].jobs[j].host,
                               hosts |-> view[s].jobs[j].alloc]}
    /\ UNCHANGED <<raftVars, stateVars, syncVars, workerVars>>

SendStop ==            \* commit before send: a preempted job's worker is told to stop it
    /\ \E h \in Hosts, j \in Jobs :
          /\ SessionCurrent(h)
          /\ st.jobs[j].state \in Halting /\ st.jobs[j].host = h
          /\ <<j, st.jobs[j].attempt>> \in known[h] \ halted[h]
          /\ down' = [down EXCEPT ![h] = Append(@, [type |-> "stop", job |-> j, attempt |-> st.jobs[j].attempt])]
          /\ halted' = [halted EXCEPT ![h] = @ \cup {<<j, st.jobs[j].attempt>>}]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, upq, unacked, known,
                   stopped>>

SendCont ==            \* resumed (its slots taken back): its worker is told to continue it
    /\ \E h \in Hosts, j \in Jobs :
          /\ SessionCurrent(h)
          /\ st.jobs[j].state = "RUN" /\ st.jobs[j].host = h
          /\ <<j, st.jobs[j].attempt>> \in halted[h]
          /\ down' = [down EXCEPT ![h] = Append(@, [type |-> "cont", job |-> j, attempt |-> st.jobs[j].attempt])]
          /\ halted' = [halted EXCEPT ![h] = @ \ {<<j, st.jobs[j].attempt>>}]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, upq, unacked, known,
                   stopped>>

WorkerStop ==          \* SIGSTOP to the group; once every process of it is stopped it says so
    /\ \E h \in Hosts :
          /\ up[h] /\ conn[h] # 0 /\ down[h] # << >>
          /\ Head(down[h]).type = "stop"
          /\ LET m == Head(down[h])
                 x == [job |-> m.job, attempt |-> m.attempt, host |-> h]
             IN /\ down' = [down EXCEPT ![h] = Tail(@)]
                /\ IF x \in inst
                   THEN /\ stopped' = stopped \cup {Key(x)}
                        /\ upq' = [upq EXCEPT ![h] = @ \cup {Report(x, "suspended")}]
                   ELSE UNCHANGED <<stopped, upq>>
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, unacked, known, halted>>

WorkerCont ==          \* SIGCONT to the group
    /\ \E h \in Hosts :
          /\ up[h] /\ conn[h] # 0 /\ down[h] # << >>
          /\ Head(down[h]).type = "cont"
          /\ down' = [down EXCEPT ![h] = Tail(@)]
          /\ stopped' = stopped \ {Key(Head(down[h]))}
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, upq, unacked, known,
                   halted>>

PreemptNext ==
    SchedulerPreempt \/ SchedulerResume \/ SendStop \/ SendCont \/ WorkerStop \/ WorkerCont

-----------------------------------------------------------------------------
Next ==
    \/ Submit \/ LeaderCrash \/ ElectLeader \/ CommitApply
    \/ SchedulerPass \/ ProposeBatch \/ LeaseTakeover \/ LeaseReply
    \/ SendRun \/ SendKill \/ WorkerStart \/ WorkerSignal \/ WorkerFinish
    \/ RelayReport \/ AckReport \/ WorkerCrash \/ WorkerRejoin \/ Joined
    \/ HeartbeatTimeout \/ ResolveHost \/ StreamBreak
    \/ Resync \/ SyncTail \/ SyncDeliver \/ SyncRepeat \/ SchedulerCrash \/ Compact

Spec == Init /\ [][Next]_vars
PreemptSpec == Init /\ [][Next \/ PreemptNext]_vars

(* Progress is owed only to what the stable case needs. *)
Fairness ==
    /\ WF_vars(CommitApply) /\ WF_vars(SendRun) /\ WF_vars(WorkerStart) /\ WF_vars(RelayReport)
    /\ WF_vars(Joined) /\ WF_vars(WorkerRejoin) /\ WF_vars(Resync) /\ WF_vars(SyncTail)
    /\ WF_vars(SyncDeliver) /\ WF_vars(LeaseReply) /\ WF_vars(SchedulerPass) /\ SF_vars(ProposeBatch)
    /\ WF_vars(WorkerFinish) /\ WF_vars(AckReport)

LiveSpec == Spec /\ Fairness

-----------------------------------------------------------------------------
(* Invariants.                                                             *)

TypeOK ==
    /\ commit \in 0..Len(log)
    /\ Len(hist) = commit
    /\ ready \in 0..Len(log) /\ (leaderUp <=> ready > 0)
    /\ floor \in 1..(commit + 1)
    /\ acked \subseteq Jobs
    /\ \A j \in Jobs : st.jobs[j].state \in JobStates
    /\ \A s \in Schedulers : view[s].rev \in 0..commit /\ syncPos[s] \in -1..commit
    /\ \A x \in inst : x.job \in Jobs /\ x.host \in Hosts
    /\ stopped \subseteq {Key(x) : x \in inst}
    /\ \A h \in Hosts : conn[h] \in 0..st.hosts[h].gen

NoDoubleRun ==         \* never two live instances of one job
    \A x, y \in inst : x.job = y.job => x = y

CapacitySafe ==        \* per resource: running slots per host within its capacity, on the host and
                       \* committed, and the GPUs committed within the host's.  On the host, the
                       \* instances not stopped: a preemptor never runs beside a victim that has not
                       \* stopped yet, and a suspended victim resumes only into room
    \A h \in Hosts :
        /\ Cardinality({x \in inst : x.host = h /\ Key(x) \notin stopped}) <= Cap
        /\ st.hosts[h].used <= st.hosts[h].slots
        /\ st.hosts[h].gused <= st.hosts[h].gpus

HeldExactly ==         \* what each host has in use is what the allocations of running jobs hold
                       \* there, taken all or nothing and given back exactly
    /\ \A j \in Jobs :
          IF st.jobs[j].state \in Live
          THEN Cardinality(st.jobs[j].alloc) = Span(j) /\ st.jobs[j].host \in st.jobs[j].alloc
          ELSE st.jobs[j].alloc = {}
    /\ \A h \in Hosts :     \* a suspended victim's slots are given back, its allocation kept
          /\ st.hosts[h].used = Cardinality({j \in Jobs : h \in Held(st, j)})
          /\ st.hosts[h].gused = Cardinality({j \in Gpu : h \in Held(st, j)})

DispatchAfterCommit == \* an instance exists only for a committed DISPATCH of that attempt
    \A x \in inst : \E i \in 1..commit :
        LET jr == Hist(i).jobs[x.job] IN jr.state = "RUN" /\ jr.attempt = x.attempt /\ jr.host = x.host

NoLostJob ==           \* an acknowledged job is in the committed state of every later leader
    \A j \in acked :
        /\ st.jobs[j].state # "none"
        /\ \E i \in 1..commit : log[i].op = [type |-> "submit", job |-> j]

ViewConsistent ==      \* a view at revision r equals the committed state at r
    \A s \in Schedulers : view[s].rev > 0 =>
        /\ view[s].jobs = Hist(view[s].rev).jobs
        /\ view[s].hosts = Hist(view[s].rev).hosts

StaleLeaseNoEffect ==  \* a batch (or PREEMPT) of an epoch (or holder) that is not current changes nothing
    \A i \in 1..commit :
        (log[i].op.type \in {"batch", "preempt"} /\ ~LeaseCurrent(Hist(i - 1), log[i].op)) => Hist(i) = Hist(i - 1)

FreshGeneration ==     \* every join of a host gets a generation above all earlier ones
    \A i, k \in 1..commit :
        (/\ i < k
         /\ log[i].op.type = "join" /\ log[k].op.type = "join"
         /\ log[i].op.host = log[k].op.host)
        => Hist(i).hosts[log[i].op.host].gen < Hist(k).hosts[log[k].op.host].gen

StaleConnectionNoEffect == \* a report or status of a superseded generation changes nothing
    \A i \in 1..commit :
        (/\ log[i].op.type \in {"report", "unavail", "resolve"}
         /\ log[i].op.gen # Hist(i - 1).hosts[log[i].op.host].gen)
        => Hist(i) = Hist(i - 1)

-----------------------------------------------------------------------------
(* Liveness, in the stable case: a leader that stays, a worker that stays  *)
(* connected and a scheduler that keeps the lease, and Sync streams that   *)
(* stop breaking; then a pending job that fits is eventually dispatched.   *)
(*                                                                         *)
(* The last clause is an assumption about the environment, as a Raft      *)
(* liveness proof assumes a stable leader: a stream that breaks and is    *)
(* re-opened forever starves the scheduler of its view, and no fairness   *)
(* can help, since each break disables SyncDeliver (TLC's counterexample: *)
(* Resync, SyncStreamBreak, forever).  It is about the breaks only: the   *)
(* protocol must still re-open the stream itself (Resync, and the resync  *)
(* that SyncTail asks for behind the events floor).  (Bounded by MaxLog,  *)
(* the premise fails once the log is full: the simulation's liveness      *)
(* phase is the unbounded evidence.)                                      *)

Stable ==
    /\ Serving /\ Room
    /\ \E h \in Hosts : up[h] /\ SessionCurrent(h)
    /\ \E s \in Schedulers : belief[s] = st.lease.epoch /\ st.lease.holder = s

EventuallyDispatched ==
    \A j \in Jobs :
        (<>[]Stable /\ <>[][~SyncStreamBreak]_vars)
            => [](st.jobs[j].state = "PEND" => <>(st.jobs[j].state # "PEND"))

=============================================================================
