// Package cluster is bmcfence's side of Kubernetes: informers and the
// observation builder that turn Nodes, Leases, Pods and VolumeAttachments into
// runner.NodeInfo, the writes the runner needs (the per-node fence-state
// compare-and-swap, the out-of-service taint, forced deletion of terminating
// pods), Events on Nodes, and leader election (RunLeader).
//
// Time: every time in a NodeView is a time on *our* injected clock at which
// we observed something change (a Lease renewal, a Ready heartbeat, Ready
// leaving True), never a timestamp a node wrote: a dead node's clock proves
// nothing, and a live node's may be skewed. The first sighting of a node
// counts as a heartbeat, so a restarted agent judges silence only from its
// own start.
//
// Ownership: we add the out-of-service taint together with the
// bmcfence.dev/taint-owner annotation in one write, and remove a taint only
// when that annotation says it is ours. A taint without it is foreign: never
// claimed, never removed. Every node write carries the resourceVersion it was
// computed from, so it never overwrites a change it did not see.
//
// Consistency: the runner re-reads the view right after each action, so the
// view reflects our own reads and writes of a Node at once, ahead of the
// informer, and a late informer event older than them does not roll it back
// (adoptNode).
//
// Work on a node: pods bound to it that are not finished, except DaemonSet
// and static (mirror) pods, which belong to the node itself and never move
// (kubectl drain skips them too; counting them would keep every real node
// "detaching" forever), and the VolumeAttachments naming it.
//
// Names shared with the CLI and the agent (annotations, labels, the taint and
// the request format) are defined here.
package cluster
