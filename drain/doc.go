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
// What this package does, pod by pod (MakePlan; nothing is written):
//
//	Deployment pod, single replica, or all
//	  available replicas on this node         rollout-restart: the node is cordoned, the
//	                                          surge lands elsewhere; gated on rollout status
//	Deployment pod with replicas elsewhere    evict (policy/v1 Eviction; PDB 429s retried)
//	StatefulSet pod (RollingUpdate/OnDelete)  evict-one-at-a-time: each replacement (same
//	                                          name) Ready before the next; no surge possible
//	bare ReplicaSet, Job, other owners        evict, without waiting for a replacement
//	DaemonSet, static (mirror), finished pod  skip
//	already terminating                       wait for it to go
//	no controller                             refuse, unless Force (then evict: gone for good)
//	emptyDir or local PersistentVolume        refuse, unless DeleteLocalData
//	nowhere to go (placement check)           refuse, unless Force (then it stays Pending)
//
// The placement check (placement.go) asks the scheduler's predicates, for
// every pod that must move, whether another schedulable node takes it.
//
// Execute cordons the node and marks it in maintenance in one
// conflict-safe write, then moves workloads with bounded parallelism,
// reports progress per workload, stops at a timeout with a Report of what
// is left and why (the PodDisruptionBudget by name, the rollout's state),
// and records DrainStarted, DrainCompleted or DrainIncomplete Events on the
// Node. Running it again continues a half-done drain. Undrain uncordons and
// ends the maintenance; WaitReady waits for a node back from maintenance.
//
// Time: every wait, backoff and timeout runs on Options.Clock, so tests
// step a fake clock.
package drain
