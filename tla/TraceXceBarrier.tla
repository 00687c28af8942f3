--------------------------- MODULE TraceXceBarrier ---------------------------
(***************************************************************************)
(* Trace validation: is a recorded run a behaviour of XceBarrier?          *)
(*                                                                         *)
(* TraceData (a module written by tests/tla_trace.py for each run) defines *)
(*   TraceFrom: where the run starts: "init" (the spec's Init), "setup"    *)
(*          (MCXceBarrier's started cluster) or "recorded" (TraceStart, a *)
(*          record of every variable);                                     *)
(*   Trace: << [action |-> "Name", vars |-> [var |-> value, ...]], ... >>, *)
(*          one element per spec action, `vars` holding the variables the *)
(*          recorder observed after it (the others are TLC's to choose).   *)
(* TraceNext takes the recorded action, and only if its result agrees with *)
(* what was observed.  TLC explores every choice the recording leaves      *)
(* open; the postcondition TraceAccepted holds when some behaviour of the  *)
(* spec matched every step, and otherwise names the first step none did.  *)
(***************************************************************************)
EXTENDS MCXceBarrier, TLC, TraceData

VARIABLE i          \* how many recorded steps have been matched
traceVars == <<vars, faults, i>>

Seen(e, name) == name \in DOMAIN e.vars

\* A partial observation of a function: the keys the recorder saw.
Part(f, g) == \A k \in DOMAIN g : f[k] = g[k]

\* The state after the step agrees with every variable the recorder observed.
Agrees(e) ==
    /\ Seen(e, "log") => log' = e.vars.log
    /\ Seen(e, "commit") => commit' = e.vars.commit
    /\ Seen(e, "term") => term' = e.vars.term
    /\ Seen(e, "leaderUp") => leaderUp' = e.vars.leaderUp
    /\ Seen(e, "ready") => ready' = e.vars.ready
    /\ Seen(e, "st") => st' = e.vars.st
    /\ Seen(e, "acked") => acked' = e.vars.acked
    /\ Seen(e, "floor") => floor' = e.vars.floor
    /\ Seen(e, "view") => view' = e.vars.view
    /\ Seen(e, "sync") => sync' = e.vars.sync
    /\ Seen(e, "syncPos") => syncPos' = e.vars.syncPos
    /\ Seen(e, "belief") => belief' = e.vars.belief
    /\ Seen(e, "rpc") => rpc' = e.vars.rpc
    /\ Seen(e, "inst") => inst' = e.vars.inst
    /\ Seen(e, "journal") => journal' = e.vars.journal
    /\ Seen(e, "up") => up' = e.vars.up
    /\ Seen(e, "conn") => conn' = e.vars.conn
    /\ Seen(e, "joining") => joining' = e.vars.joining
    /\ Seen(e, "down") => down' = e.vars.down
    /\ Seen(e, "upq") => upq' = e.vars.upq
    /\ Seen(e, "unacked") => unacked' = e.vars.unacked
    /\ Seen(e, "known") => known' = e.vars.known
    \* partial observations: what one step of the code shows
    /\ Seen(e, "op") => Len(log') = Len(log) + 1 /\ log'[Len(log')].op = e.vars.op
    /\ Seen(e, "logLen") => Len(log') = e.vars.logLen
    /\ Seen(e, "batch") => rpc' = rpc \cup {e.vars.batch}
    /\ Seen(e, "viewOf") => Part(view', e.vars.viewOf)

\* An entry the spec does not model (configuration, a replica's announcement, a batch of
\* PEND decisions only or past its lease, a submit or report already in the log): the real
\* log holds it, so the spec's log holds a no-op there, and indices stay aligned.  This
\* widens the spec only by entries that change nothing.
OtherEntry ==
    /\ Serving /\ Room
    /\ Propose([type |-> "noop"])
    /\ UNCHANGED <<commit, term, leaderUp, ready, stateVars, syncVars, rpc, workerVars>>

\* A step of the code the spec does not see; its observations must not have changed.
Stutter == UNCHANGED vars

Action(name) ==
    CASE name = "Submit" -> Submit
    []   name = "LeaderCrash" -> LeaderCrash
    []   name = "ElectLeader" -> ElectLeader
    []   name = "CommitApply" -> CommitApply
    []   name = "SchedulerPass" -> SchedulerPass
    []   name = "ProposeBatch" -> ProposeBatch
    []   name = "LeaseTakeover" -> LeaseTakeover
    []   name = "LeaseReply" -> LeaseReply
    []   name = "SendRun" -> SendRun
    []   name = "SendKill" -> SendKill
    []   name = "WorkerStart" -> WorkerStart
    []   name = "WorkerSignal" -> WorkerSignal
    []   name = "WorkerFinish" -> WorkerFinish
    []   name = "RelayReport" -> RelayReport
    []   name = "AckReport" -> AckReport
    []   name = "WorkerCrash" -> WorkerCrash
    []   name = "WorkerRejoin" -> WorkerRejoin
    []   name = "Joined" -> Joined
    []   name = "HeartbeatTimeout" -> HeartbeatTimeout
    []   name = "ResolveHost" -> ResolveHost
    []   name = "StreamBreak" -> StreamBreak
    []   name = "Resync" -> Resync
    []   name = "SyncTail" -> SyncTail
    []   name = "SyncDeliver" -> SyncDeliver
    []   name = "SyncRepeat" -> SyncRepeat
    []   name = "SchedulerCrash" -> SchedulerCrash
    []   name = "Compact" -> Compact
    []   name = "OtherEntry" -> OtherEntry
    []   name = "Stutter" -> Stutter

Recorded ==
    /\ log = TraceStart.log /\ commit = TraceStart.commit /\ term = TraceStart.term
    /\ leaderUp = TraceStart.leaderUp /\ ready = TraceStart.ready /\ st = TraceStart.st
    /\ hist = TraceStart.hist /\ acked = TraceStart.acked /\ floor = TraceStart.floor
    /\ view = TraceStart.view /\ sync = TraceStart.sync /\ syncPos = TraceStart.syncPos
    /\ belief = TraceStart.belief /\ rpc = TraceStart.rpc /\ inst = TraceStart.inst
    /\ journal = TraceStart.journal /\ up = TraceStart.up /\ conn = TraceStart.conn
    /\ joining = TraceStart.joining /\ down = TraceStart.down /\ upq = TraceStart.upq
    /\ unacked = TraceStart.unacked /\ known = TraceStart.known
    /\ stopped = {} /\ halted = [h \in Hosts |-> {}]   \* the simulation does not preempt

TraceInit ==
    /\ i = 0
    /\ faults = 0
    /\ CASE TraceFrom = "init" -> Init
         []   TraceFrom = "setup" -> SetupInit
         []   OTHER -> Recorded

TraceNext ==
    /\ i < Len(Trace)
    /\ Action(Trace[i + 1].action)
    /\ Agrees(Trace[i + 1])
    /\ i' = i + 1
    /\ UNCHANGED faults

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

\* TLC's diameter is the longest matched prefix plus one (the initial state is level 1).
TraceAccepted ==
    LET d == TLCGet("stats").diameter IN
    IF d - 1 = Len(Trace) THEN TRUE
    ELSE Print(<<"TRACE REJECTED at step", d, Trace[d].action>>, FALSE)
=============================================================================
