// Package fence decides, and only decides, when a node is fenced.
//
// Step is a pure, deterministic function in the style of etcd's raft:
//
//	Step(policy, state, input, now) → Output{State, Actions, RecheckAfter}
//
// It performs no I/O, reads no clock, starts no goroutine and logs nothing.
// The runner (fence/runner) executes the Actions in order, feeds their
// results back as Inputs, and persists State on the Node so that a restarted
// agent or a new leader resumes exactly where the last one stopped.
//
// The package imports only the standard library (and internal/mutant, which
// imports nothing and is a constant false outside the mutation test), so the
// whole decision can be read, tested and fuzzed on its own. The invariants it owns, numbered as
// its tests name them (docs/design.md §2 lists every invariant of bmcfence):
//
//  1. ApplyTaint is emitted only after a settled run of exact-Off readings
//     (SettleReads consecutive reads spanning SettleWindow), every one later
//     than the start of the failure and later than our last power-off
//     request, the last one just received, none with BootProgress claiming a
//     running OS — or after a human's explicit confirm.
//  2. PowerOff is emitted only when the storm guard admits it (Admit for a
//     machine that may run; AdmitPowerLoss for one whose BMC reads exactly
//     Off), or for a human's explicit fence request.
//  4. RemoveTaint is emitted only for a taint we applied, when the node is
//     Ready with a heartbeat observed after the taint.
//  6. A node in maintenance, excluded by label, or without a BMC is never
//     fenced automatically.
//  7. Step is deterministic.
package fence
