---------------------------- MODULE MCXceBarrier ----------------------------
(***************************************************************************)
(* Finite models of XceBarrier for TLC (tla/README.md: constants, figures, *)
(* how to run).  The spec stays as written; what only makes the state     *)
(* space finite and small lives here:                                      *)
(*   - a fault budget: the environment's faults (crashes, stream breaks,  *)
(*     repeats, compaction) are each an ordinary action of the spec,      *)
(*     taken at most MaxFaults times in one behaviour;                     *)
(*   - a started cluster as the initial state (SetupInit), as the         *)
(*     protocol simulation starts: the log's first entries are not spent  *)
(*     on every order of joins and the first lease;                        *)
(*   - state constraints: how many entries of each kind the log may hold, *)
(*     and how many messages may be in flight (which also prunes some     *)
(*     interleavings, e.g. a kill and a run in flight together);           *)
(*   - symmetry of jobs and hosts and a view without the derived st and   *)
(*     hist (MCInit only: from SetupInit no permuted state is reachable,   *)
(*     and the view only hashes less);                                     *)
(*   - the five injected protocol bugs of tests/protocol_sim/bugs.py, as  *)
(*     variants of the spec's operators that a .cfg swaps in (`A <- MutA`).*)
EXTENDS XceBarrier, TLC

CONSTANTS
    MaxFaults,     \* faults in one behaviour
    Submitted,     \* the jobs submitted (and acknowledged) in the started cluster
    MaxSyncQueue,  \* messages in flight on a Sync stream
    MaxBatches,    \* decision batches ever sent (`rpc` only grows)
    MaxDown,       \* commands in flight to a worker
    EntryBound     \* [entry type |-> the most entries of that type the log may hold]

VARIABLE faults    \* faults taken so far
mcVars == <<vars, faults>>

Fault(A) == A /\ faults < MaxFaults /\ faults' = faults + 1
Step(A)  == A /\ UNCHANGED faults

\* Next, each action classed as the protocol's own step or a fault of its environment.
\* (Written out twice, not through an operator argument: TLC names an action in a
\* trace and in its coverage report by where it is written.)
MCNext ==
    \/ Step(Submit) \/ Fault(LeaderCrash) \/ Step(ElectLeader) \/ Step(CommitApply)
    \/ Step(SchedulerPass) \/ Step(ProposeBatch) \/ Step(LeaseTakeover) \/ Step(LeaseReply)
    \/ Step(SendRun) \/ Step(SendKill) \/ Step(WorkerStart) \/ Step(WorkerSignal)
    \/ Step(WorkerFinish) \/ Step(RelayReport) \/ Step(AckReport) \/ Fault(WorkerCrash)
    \/ Step(WorkerRejoin) \/ Step(Joined) \/ Fault(HeartbeatTimeout) \/ Step(ResolveHost)
    \/ Fault(StreamBreak) \/ Step(Resync) \/ Step(SyncTail) \/ Step(SyncDeliver)
    \/ Fault(SyncRepeat) \/ Fault(SchedulerCrash) \/ Fault(Compact)

\* Next and preemption's actions (XceBarrier's PreemptNext), for a model with preemptable jobs.
MCPreemptNext ==
    \/ MCNext
    \/ Step(SchedulerPreempt) \/ Step(SchedulerResume) \/ Step(SendStop) \/ Step(SendCont)
    \/ Step(WorkerStop) \/ Step(WorkerCont)

\* Next with no budget, for liveness: faults as often as they like.
LiveNext ==
    \/ Step(Submit) \/ Step(LeaderCrash) \/ Step(ElectLeader) \/ Step(CommitApply)
    \/ Step(SchedulerPass) \/ Step(ProposeBatch) \/ Step(LeaseTakeover) \/ Step(LeaseReply)
    \/ Step(SendRun) \/ Step(SendKill) \/ Step(WorkerStart) \/ Step(WorkerSignal)
    \/ Step(WorkerFinish) \/ Step(RelayReport) \/ Step(AckReport) \/ Step(WorkerCrash)
    \/ Step(WorkerRejoin) \/ Step(Joined) \/ Step(HeartbeatTimeout) \/ Step(ResolveHost)
    \/ Step(StreamBreak) \/ Step(Resync) \/ Step(SyncTail) \/ Step(SyncDeliver)
    \/ Step(SyncRepeat) \/ Step(SchedulerCrash) \/ Step(Compact)

-----------------------------------------------------------------------------
(* A started cluster: a leader of term 1 serving, every worker joined, one *)
(* scheduler holding the lease with a view at the last revision and its   *)
(* Sync stream open, the jobs of `Submitted` pending.                      *)

RECURSIVE SeqOf(_)
SeqOf(S) == IF S = {} THEN << >> ELSE LET x == CHOOSE x \in S : TRUE IN <<x>> \o SeqOf(S \ {x})

RECURSIVE States(_, _)     \* the state after each op of ops, applied in order from S
States(S, ops) == IF ops = << >> THEN << >>
                  ELSE LET next == ApplyOp(S, Head(ops)) IN <<next>> \o States(next, Tail(ops))

TheScheduler == CHOOSE s \in Schedulers : TRUE
SetupOps ==
    <<[type |-> "noop"]>>
    \o [i \in 1..Cardinality(Hosts) |-> [type |-> "join", host |-> SeqOf(Hosts)[i]]]
    \o <<[type |-> "lease", sched |-> TheScheduler, expired |-> FALSE]>>
    \o [i \in 1..Cardinality(Submitted) |-> [type |-> "submit", job |-> SeqOf(Submitted)[i]]]
SetupHist == States(Init0, SetupOps)
SetupLen == Len(SetupOps)

SetupInit ==
    /\ log = [i \in 1..SetupLen |-> [term |-> 1, op |-> SetupOps[i]]]
    /\ commit = SetupLen
    /\ term = 1
    /\ leaderUp = TRUE
    /\ ready = 1
    /\ st = SetupHist[SetupLen]
    /\ hist = SetupHist
    /\ acked = Submitted
    /\ floor = 1
    /\ view = [s \in Schedulers |->
                  IF s = TheScheduler
                  THEN [rev |-> SetupLen, jobs |-> SetupHist[SetupLen].jobs,
                        hosts |-> SetupHist[SetupLen].hosts]
                  ELSE EmptyView]
    /\ sync = [s \in Schedulers |-> << >>]
    /\ syncPos = [s \in Schedulers |-> IF s = TheScheduler THEN SetupLen ELSE -1]
    /\ belief = [s \in Schedulers |-> IF s = TheScheduler THEN 1 ELSE 0]
    /\ rpc = {}
    /\ inst = {}
    /\ journal = [h \in Hosts |-> {}]
    /\ up = [h \in Hosts |-> TRUE]
    /\ conn = [h \in Hosts |-> 1]
    /\ joining = [h \in Hosts |-> 0]
    /\ down = [h \in Hosts |-> << >>]
    /\ upq = [h \in Hosts |-> {}]
    /\ unacked = [h \in Hosts |-> {}]
    /\ known = [h \in Hosts |-> {}]
    /\ stopped = {}
    /\ halted = [h \in Hosts |-> {}]

\* Safety from the spec's own Init, or from a started cluster.
MCSpec      == Init /\ faults = 0 /\ [][MCNext]_mcVars
MCSetupSpec == SetupInit /\ faults = 0 /\ [][MCNext]_mcVars
\* Liveness: every action of Next, faults without a budget, the spec's fairness.
MCLiveSpec  == SetupInit /\ faults = 0 /\ [][LiveNext]_mcVars /\ Fairness
MCPreemptSpec == SetupInit /\ faults = 0 /\ [][MCPreemptNext]_mcVars

-----------------------------------------------------------------------------
\* EntryBound of each model (a .cfg cannot write a record): on top of the started
\* cluster's noop, joins, lease and submits, room for one more of most kinds.
CIEntries    == [noop |-> 2, submit |-> 2, join |-> 3, lease |-> 2, batch |-> 2, report |-> 2,
                 unavail |-> 1, resolve |-> 1]
LiveEntries  == [noop |-> 1, submit |-> 1, join |-> 2, lease |-> 1, batch |-> 1, report |-> 1,
                 unavail |-> 1, resolve |-> 1]
\* The resume, and no more: the low job dispatched, preempted, stopped; the high one dispatched
\* and ended; the low one resumed (no start reports in the spec's log; its last end left out).
PreemptEntries == [noop |-> 1, submit |-> 2, join |-> 1, lease |-> 1, batch |-> 3, report |-> 2,
                   unavail |-> 0, resolve |-> 0, preempt |-> 1]
\* CI's cut: a low job dispatched and preempted, its stop reported, the high one dispatched.
CIPreemptEntries == [noop |-> 1, submit |-> 2, join |-> 1, lease |-> 1, batch |-> 2, report |-> 2,
                     unavail |-> 0, resolve |-> 0, preempt |-> 1]

\* The CI model (and MCTwoFaults, MCTwoSchedulers, which extend it) reports every end
\* WorkerFinish sees with a status: a "lost" end (no status) still comes from machine
\* crashes there, and from WorkerFinish in MCInit and MCLive; with both kinds in
\* WorkerFinish the CI model outgrows its 3 minutes (859,486 states, 145 s).
CIEndKinds == {"finished"}

Entries(t) == Cardinality({i \in 1..Len(log) : log[i].op.type = t})

Constraint ==
    /\ \A t \in DOMAIN EntryBound : Entries(t) <= EntryBound[t]
    /\ \A s \in Schedulers : Len(sync[s]) <= MaxSyncQueue
    /\ Cardinality(rpc) <= MaxBatches
    /\ \A h \in Hosts : Len(down[h]) <= MaxDown

\* Compaction drops every event up to the commit index: the snapshot path, and the
\* "resync required" of a stream behind the floor, without one state per floor in between.
CompactToCommit == floor' # floor => floor' = commit

\* st and hist follow from log[1..commit]: leaving them out of a state's identity loses nothing.
MCView == <<log, commit, term, leaderUp, ready, acked, syncVars, rpc, workerVars, faults>>

Symmetry == Permutations(Jobs) \cup Permutations(Hosts)

\* What each action of the next-state relation reached, printed once the check ends: a POSTCONDITION
\* of a run with TLC counting its actions' states (-Dtlc2.TLCGlobals.coverage=1; tests/tlc.py).
ActionsTaken == PrintT(<<"actions taken", TLCGet("spec").actions>>)

-----------------------------------------------------------------------------
(* The injected bugs of tests/protocol_sim/bugs.py, one variant each.     *)

\* run_before_commit: the leader reads proposed state as committed and sends RunJob for it.
Proposed == LET F[i \in 0..Len(log)] == IF i = 0 THEN Init0 ELSE ApplyOp(F[i - 1], log[i].op)
            IN F[Len(log)]
MutSendRun ==
    /\ \E h \in Hosts, j \in Jobs :
          /\ SessionCurrent(h)
          /\ j \in Running(Proposed, h)
          /\ <<j, Proposed.jobs[j].attempt>> \notin known[h]
          /\ down' = [down EXCEPT ![h] = Append(@, [type |-> "run", job |-> j,
                                                    attempt |-> Proposed.jobs[j].attempt,
                                                    stop |-> Proposed.jobs[j].state \in Halting])]
          /\ known' = [known EXCEPT ![h] = @ \cup {<<j, Proposed.jobs[j].attempt>>}]
    /\ UNCHANGED <<raftVars, stateVars, syncVars, rpc, inst, journal, up, conn, joining, upq, unacked,
                   stopped, halted>>

\* requeue_on_success: a `started` report puts the job back to PEND (the seed's bug-1512).
\* (Written out whole: ApplyReport is the operator it replaces.)
MutApplyReport(S, op) ==
    IF ~Wanted(S, op) THEN S
    ELSE CASE op.kind = "finished" -> [S EXCEPT !.jobs[op.job] = [state |-> "DONE", attempt |-> op.attempt,
                                                                 host |-> None, alloc |-> {}],
                                                !.hosts = Release(S.hosts, op.job, S.jobs[op.job].alloc)]
         []   op.kind \in {"started", "failed", "lost"} ->
                  [S EXCEPT !.jobs[op.job] = [state |-> "PEND", attempt |-> op.attempt + 1, host |-> None,
                                              alloc |-> {}],
                            !.hosts = Release(S.hosts, op.job, S.jobs[op.job].alloc)]

\* join_without_generation_bump: a re-join keeps the host's generation.
MutApplyJoin(S, op) ==
    [S EXCEPT !.hosts[op.host] = [status |-> "OK", gen |-> IF @.gen = 0 THEN 1 ELSE @.gen,
                                  used |-> @.used, slots |-> Cap, gused |-> @.gused, gpus |-> GCap]]

\* view_accepts_old_events: the view applies an event not newer than its revision.
MutSyncDeliver ==
    /\ \E s \in Schedulers :
          /\ sync[s] # << >>
          /\ LET m == Head(sync[s]) IN
                view' = [view EXCEPT ![s] =
                            IF m.kind = "snapshot"
                            THEN [rev |-> m.rev, jobs |-> Hist(m.rev).jobs, hosts |-> Hist(m.rev).hosts]
                            ELSE ApplyEvent(@, m.rev)]
          /\ sync' = [sync EXCEPT ![s] = Tail(@)]
    /\ UNCHANGED <<raftVars, stateVars, floor, syncPos, belief, rpc, workerVars>>

\* The liveness property as it stood before (tla/README.md): no assumption that Sync
\* streams stop breaking; it fails (tests/tla/test_tlc.py).
EventuallyDispatchedAnyBreaks ==
    \A j \in Jobs :
        (<>[]Stable) => [](st.jobs[j].state = "PEND" => <>(st.jobs[j].state # "PEND"))

\* A scheduler's stream that is never re-opened: the premise must not excuse it.
NoResync == FALSE

\* stale_lease_accepted: the barrier does not check the batch's lease.
MutApplyBatch(S, op) ==
    IF /\ S.jobs[op.job].state = "PEND"
       /\ S.jobs[op.job].attempt = op.attempt
       /\ Cardinality(op.hosts) = Span(op.job) /\ op.host \in op.hosts
       /\ \A h \in op.hosts : Fits(S.hosts, op.job, h)
    THEN [S EXCEPT !.jobs[op.job] = [state |-> "RUN", attempt |-> op.attempt, host |-> op.host,
                                     alloc |-> op.hosts],
                   !.hosts = [h \in Hosts |-> IF h \in op.hosts
                                              THEN [S.hosts[h] EXCEPT !.used = @ + 1, !.gused = @ + G(op.job)]
                                              ELSE S.hosts[h]]]
    ELSE S

\* preempt_releases_early: PREEMPT gives the victim's slots back at once, not once its worker says it
\* stopped: the preemptor may run beside a victim still running, and CapacitySafe fails.
MutApplyPreemptEarly(S, op) ==
    IF /\ LeaseCurrent(S, op)
       /\ S.jobs[op.job].state = "PEND" /\ S.jobs[op.job].attempt = op.attempt /\ op.job \notin Low
       /\ op.victim \in Low /\ S.jobs[op.victim].state = "RUN" /\ S.jobs[op.victim].attempt = op.vattempt
    THEN [S EXCEPT !.jobs[op.victim].state = "SSUSP",
                   !.hosts = Release(S.hosts, op.victim, S.jobs[op.victim].alloc)]
    ELSE S

\* partial_allocation: the barrier checks only an allocation's first host (a parallel job's other
\* hosts taken unchecked): HeldExactly holds, CapacitySafe fails (a host over its slots or GPUs).
MutApplyBatchFirstOnly(S, op) ==
    IF /\ LeaseCurrent(S, op)
       /\ S.jobs[op.job].state = "PEND"
       /\ S.jobs[op.job].attempt = op.attempt
       /\ Cardinality(op.hosts) = Span(op.job) /\ op.host \in op.hosts
       /\ Fits(S.hosts, op.job, op.host)
    THEN [S EXCEPT !.jobs[op.job] = [state |-> "RUN", attempt |-> op.attempt, host |-> op.host,
                                     alloc |-> op.hosts],
                   !.hosts = [h \in Hosts |-> IF h \in op.hosts
                                              THEN [S.hosts[h] EXCEPT !.used = @ + 1, !.gused = @ + G(op.job)]
                                              ELSE S.hosts[h]]]
    ELSE S
=============================================================================
