// Package drain empties a node for planned maintenance without taking
// workloads down, and ties the maintenance to fencing: a drained node
// carries the bmcfence.dev/maintenance annotation, and the agent never
// fences a node in maintenance. The CLI's `kubectl fence drain|undrain`
// is built on it.
//
// Why not `kubectl drain`: it evicts every pod regardless of its
// workload's update strategy, so a Deployment whose replicas all run on the
// node is down until replacements start elsewhere. kubectl-safe-drain
// rollout-restarts every Deployment and StatefulSet on the node instead,
// but that restarts replicas on every node, hangs on OnDelete StatefulSets
// and unsupported owners, never evicts what is left, ignores node
// affinity and selectors, and is not paced by PodDisruptionBudgets.
//
// What this package does, pod by pod (MakePlan; nothing is written). The
// promise: a workload never drops below what its own strategy allows
// (PodPlan.Bound): a Deployment replicas − maxUnavailable, a StatefulSet
// one pod at a time.
//
//	Deployment pod, replicas elsewhere        evict (policy/v1 Eviction; PDB 429s retried)
//	  meet its bound
//	Deployment pod, one at a time meets it    evict-one-at-a-time: each eviction waits until
//	                                          the Deployment has room (status and Ready pods)
//	Deployment pod otherwise (maxUnavailable  rollout-restart: the node is cordoned, the
//	  0, one replica, all of them here)       surge lands elsewhere; gated on rollout status
//	paused Deployment it cannot keep          refuse, unless Force
//	StatefulSet pod (RollingUpdate/OnDelete)  evict-one-at-a-time: each replacement (same
//	                                          name) Ready before the next; no surge possible
//	bare ReplicaSet, Job, other owners        evict, without waiting for a replacement
//	DaemonSet, static (mirror), finished pod  skip
//	already terminating                       wait for it to go
//	no controller                             refuse, unless Force (then evict: gone for good)
//	emptyDir, inline hostPath, local or       refuse, unless DeleteLocalData
//	  hostPath PersistentVolume
//	selected by two PodDisruptionBudgets      refuse (the Eviction API never evicts it)
//	nowhere to go (placement check)           refuse, unless Force (then it stays Pending)
//
// The placement check (placement.go) asks the scheduler's predicates, for
// every pod that must move, whether another schedulable node takes it.
//
// Execute cordons the node and marks it in maintenance in one
// conflict-safe write (the mark records whether it cordoned, and expires
// Timeout + 2 m after the agent sees it while the drain runs), then moves
// workloads with bounded parallelism, reports progress per workload, stops
// at a timeout with a Report of what is left and why (the
// PodDisruptionBudget by name, the rollout's state), and records
// DrainStarted, DrainCompleted or DrainIncomplete Events on the Node. A
// complete drain makes the mark last (until undrain, or MaintenanceFor); a
// node that goes NotReady stops the drain, and an incomplete drain on a
// NotReady node removes the mark (keeps the cordon) so the agent may fence
// it. Running it again continues a half-done drain. Undrain ends the
// maintenance and undoes the drain's cordon only; Release gives a node that
// is down back to fencing; WaitReady waits for a node back from
// maintenance.
//
// Time: every wait, backoff and timeout runs on Options.Clock, so tests
// step a fake clock.
package drain
