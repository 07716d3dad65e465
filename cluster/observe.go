package cluster

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// maxBlockers bounds View.Blockers: enough to act on, short enough for an
// Event message.
const maxBlockers = 5

// signal remembers the last value of one liveness timestamp a node writes
// (its Lease's renewTime, its Ready condition's lastHeartbeatTime). Only a
// *change* of the value is evidence of life; the value itself is the node's
// clock and proves nothing.
type signal struct {
	seen  bool
	value time.Time
}

// observe records v and reports whether it is news (a value we have not
// seen, the first one included) and whether it is a renewal (it replaced a
// value we had seen: the node wrote it while we watched). A zero v (no lease
// yet, no condition) is no news.
func (s *signal) observe(v time.Time) (news, renewal bool) {
	if v.IsZero() || (s.seen && s.value.Equal(v)) {
		return false, false
	}
	renewal = s.seen
	s.seen, s.value = true, v
	return true, renewal
}

// newerThanObserved reports whether v, read from the server, is a value our
// informers have not delivered: a write we have not seen. "Newer" means a
// later write, not a later timestamp: a rebooted node's clock may run behind.
func (s *signal) newerThanObserved(v time.Time) bool {
	return !v.IsZero() && (!s.seen || !s.value.Equal(v))
}

// observation is what we remember about one node between events, and when,
// on our clock, we saw things change.
type observation struct {
	// heartbeatAt: the last time we saw a sign of life; the first sighting
	// of the node (or its Lease) counts, so a restarted agent judges silence
	// only from its own start.
	heartbeatAt time.Time
	// heartbeatFrom: the earliest that sign of life can have been written
	// (fence.NodeView.HeartbeatFrom): for a Lease renewal, the start of the
	// last complete list before the one that brought it in (a Lease first
	// listed then was not in that list either: it was written, or its
	// renewal is older, which only places it later than it was); zero for
	// a Ready heartbeat (the Node watch places nothing) and for what the
	// process's first list brought in.
	heartbeatFrom time.Time
	// renewedAt: the last time we saw the node renew (a value replacing one
	// we had seen). Zero until then: a first sighting is no sign of life.
	renewedAt time.Time
	lease     signal
	readyBeat signal

	nodeSeen      bool
	nodeVersion   string // resourceVersion last observed
	ready         fence.Readiness
	notReadySince time.Time

	// The request annotation as last seen (never acted on; see
	// observeRequest).
	requestRaw string

	// maintenance: the maintenance mark as last seen, and since when.
	maintenance maintenanceMark

	// shutdownSeenAt: when we first saw the kubelet announce a graceful
	// node shutdown (observeShutdown); zero when none is remembered.
	shutdownSeenAt time.Time
}

// maintenanceMark is the maintenance annotation as we last saw it, when we
// first saw that value (our clock), and the duration it carries.
type maintenanceMark struct {
	raw    string
	seenAt time.Time
	expiry time.Duration // 0: until removed
}

func newMaintenanceMark(raw string, now time.Time) maintenanceMark {
	m := maintenanceMark{raw: raw, seenAt: now}
	if d, err := DecodeMaintenance(raw); err == nil {
		m.expiry = d.Expiry()
	}
	return m
}

// at says whether the mark is in force at now, or expired: a mark with a
// duration holds until it has been seen, unchanged, for that long on our
// clock. Its Since (the writer's clock, a laptop's) plays no part: one
// clock per proof. A new value starts again; so does a restarted agent or
// a new leader, whose first sight is its own start.
func (m maintenanceMark) at(now time.Time) (inForce, expired bool) {
	switch {
	case m.raw == "":
		return false, false
	case m.expiry > 0 && now.Sub(m.seenAt) >= m.expiry:
		return false, true
	}
	return true, false
}

func newObservation(now time.Time) *observation {
	return &observation{heartbeatAt: now}
}

// observeLease takes in a Lease event seen at now and reports whether the
// node showed a sign of life (its renewTime changed).
// from is the start of the last complete list of the Leases (zero if none):
// a renewal this list brings in was not in that one.
func (o *observation) observeLease(l *coordinationv1.Lease, now, from time.Time) bool {
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	news, renewal := o.lease.observe(renew)
	if !news {
		return false
	}
	o.heartbeatAt, o.heartbeatFrom = now, from
	if renewal {
		o.renewedAt = now
	}
	return true
}

// observeNode takes in the node as seen at now: its Ready heartbeat
// (a change is a sign of life, like a Lease renewal) and Ready transitions.
func (o *observation) observeNode(n *corev1.Node, now time.Time) {
	ready, beat := readiness(n)
	if news, renewal := o.readyBeat.observe(beat); news {
		o.heartbeatAt, o.heartbeatFrom = now, time.Time{}
		if renewal {
			o.renewedAt = now
		}
	}
	switch {
	case ready == fence.ReadyTrue:
		o.notReadySince = time.Time{}
	case !o.nodeSeen || o.ready == fence.ReadyTrue:
		// Ready left True now (or was not True when we first saw the
		// node: we know nothing earlier).
		o.notReadySince = now
	}
	o.ready = ready
	o.nodeSeen = true
	o.nodeVersion = n.ResourceVersion
	if raw := n.Annotations[AnnotationMaintenance]; raw != o.maintenance.raw {
		o.maintenance = newMaintenanceMark(raw, now)
	}
	o.observeShutdown(n, ready, now)
}

// LabelControlPlane marks a control-plane node (kubeadm and most
// distributions set it; its value is empty): fence.NodeView.ControlPlane.
const LabelControlPlane = "node-role.kubernetes.io/control-plane"

// SignalGracefulShutdown names the kubelet's graceful node shutdown in
// Events ("planned reboot (the kubelet's graceful node shutdown)").
const SignalGracefulShutdown = "the kubelet's graceful node shutdown"

// shutdownMessage is what the kubelet's Ready condition says once logind
// told it the machine shuts down (k8s.io/kubernetes pkg/kubelet/nodestatus
// ReadyCondition, with the shutdown manager's error: reason
// KubeletNotReady, message "node is shutting down").
const shutdownMessage = "node is shutting down"

// ShuttingDown reports whether the node's Ready condition carries the
// kubelet's graceful-shutdown announcement.
func ShuttingDown(n *corev1.Node) bool {
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue && (strings.Contains(c.Message, shutdownMessage) || strings.Contains(c.Reason, shutdownMessage))
		}
	}
	return false
}

// observeShutdown remembers, on our clock, when the kubelet announced a
// graceful node shutdown. The announcement lasts only until the node
// lifecycle controller overwrites the Ready condition (Unknown, "Kubelet
// stopped posting node status", node-monitor-grace-period later), so it is
// remembered until the node is Ready again: the reboot is over. A process
// that starts during the reboot has not seen it (docs/safety.md, "Planned
// reboots").
func (o *observation) observeShutdown(n *corev1.Node, ready fence.Readiness, now time.Time) {
	switch {
	case ShuttingDown(n):
		if o.shutdownSeenAt.IsZero() {
			o.shutdownSeenAt = now
		}
	case ready == fence.ReadyTrue:
		o.shutdownSeenAt = time.Time{}
	}
}

// MaxRequestAge bounds how old a fence or confirm request may be when we
// first see it. An older one (left by a CLI that timed out, or written while
// no agent would act on it) speaks of a machine that may have changed since:
// a human's "it is off" from yesterday is no proof today. Abort and unfence
// only make things safer, so they have no limit. 15 minutes exceeds the
// CLI's wait for an agent and tolerates some clock skew between the two.
const MaxRequestAge = 15 * time.Minute

// observeRequest reports, once per distinct value, a request annotation
// written on the node: the channel of kubectl-fence before requests became
// BMCFenceRequest objects. Anyone able to patch the Node (its own kubelet
// included) could write one and name any user, so it is never acted on;
// the caller warns that the CLI is too old.
func (o *observation) observeRequest(n *corev1.Node, _ time.Time) error {
	raw := n.Annotations[AnnotationRequest]
	if raw == o.requestRaw {
		return nil
	}
	o.requestRaw = raw
	if raw == "" {
		return nil
	}
	return fmt.Errorf("%w: requests are BMCFenceRequest objects now (authenticated by the API server); this one was written by an old kubectl-fence, or by someone able to patch the Node", ErrAnnotationRequest)
}

// readiness reads the Ready condition: its status (missing → Unknown) and
// its lastHeartbeatTime (zero when missing).
func readiness(n *corev1.Node) (fence.Readiness, time.Time) {
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Type != corev1.NodeReady {
			continue
		}
		r := fence.ReadyUnknown
		switch c.Status {
		case corev1.ConditionTrue:
			r = fence.ReadyTrue
		case corev1.ConditionFalse:
			r = fence.ReadyFalse
		case corev1.ConditionUnknown:
		}
		return r, c.LastHeartbeatTime.Time
	}
	return fence.ReadyUnknown, time.Time{}
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	r, _ := readiness(n)
	return r == fence.ReadyTrue
}

// TaintStateOf says whether the node carries the out-of-service taint and
// whose it is. Ours means: the taint we add (key and effect) is there, and
// the owner annotation names it (TaintOwnerMark: its TimeAdded). Any other taint with the key is
// foreign: the controllers act on the key alone, so the node is out of
// service, but not by our hand.
func TaintStateOf(n *corev1.Node) fence.TaintState {
	if i := ourTaintIndex(n); i >= 0 && n.Annotations[AnnotationTaintOwner] == TaintOwnerMark(n.Spec.Taints[i]) {
		return fence.TaintOurs
	}
	if HasOutOfServiceTaint(n) {
		return fence.TaintForeign
	}
	return fence.TaintAbsent
}

// ourTaintIndex finds the taint we add, identified like Kubernetes
// identifies taints (Taint.MatchTaint: key and effect).
func ourTaintIndex(n *corev1.Node) int {
	want := OutOfServiceTaint()
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].MatchTaint(&want) {
			return i
		}
	}
	return -1
}

// InMaintenance reports whether the node carries a maintenance mark, as
// written (a planned drain puts it there). Whether the agent still honours
// it (a mark may carry a duration, judged on the agent's clock) is the
// observation builder's: fence.NodeView.Maintenance.
func InMaintenance(n *corev1.Node) bool { return n.Annotations[AnnotationMaintenance] != "" }

// HasOutOfServiceTaint reports whether the node carries a taint with the
// out-of-service key, ours or anyone's: the key alone is what the
// controllers act on.
func HasOutOfServiceTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == TaintKey {
			return true
		}
	}
	return false
}

// podsNotListed is the first blocker of a node whose pods are not listed.
var podsNotListed = []string{"pods not listed yet"}

// buildInfo assembles the runner's view of one node from the cached objects
// and our observations. pods and vas are those the informers index under the
// node's name; podsKnown is false when the node's pods have not been listed
// (PodsOfFencingNodesOnly): the view then says PodsUnknown.
func buildInfo(n *corev1.Node, o *observation, pods []*podSummary, podsKnown bool, vas []*storagev1.VolumeAttachment) runner.NodeInfo {
	v := fence.NodeView{
		Ready:         o.ready,
		NotReadySince: o.notReadySince,
		HeartbeatAt:   o.heartbeatAt,
		HeartbeatFrom: o.heartbeatFrom,
		RenewedAt:     o.renewedAt,
		Excluded:      n.Labels[LabelExclude] == LabelExcludeValue,
		Taint:         TaintStateOf(n),
	}
	if !o.shutdownSeenAt.IsZero() {
		v.PlannedReboot, v.PlannedRebootAt, v.PlannedRebootBy = true, o.shutdownSeenAt, SignalGracefulShutdown
	}
	_, v.ControlPlane = n.Labels[LabelControlPlane]
	var tolerating, others []*podSummary
	for _, p := range pods {
		if p.deleting {
			v.Terminating++
		}
		if !p.tiesWork() {
			continue
		}
		v.Pods++
		if p.toleratesOutOfService {
			tolerating = append(tolerating, p)
		} else {
			others = append(others, p)
		}
	}
	v.VolumeAttachments = len(vas)
	v.Blockers = blockers(tolerating, others, vas)
	if !podsKnown {
		v.PodsUnknown = true
		if len(vas) == 0 {
			v.Blockers = podsNotListed // shared, read only: every node not being fenced
		} else {
			v.Blockers = append([]string{podsNotListed[0]}, v.Blockers...)
			v.Blockers = v.Blockers[:min(len(v.Blockers), maxBlockers)]
		}
	}
	info := runner.NodeInfo{
		Name:  n.Name,
		Zone:  n.Labels[LabelZone],
		View:  v,
		State: n.Annotations[AnnotationState],

		KubeletAddr: kubeletAddr(n),
	}
	return info
}

// kubeletAddr is where the node's kubelet port is reached: its InternalIP
// and status.daemonEndpoints.kubeletEndpoint.Port; "" when it shows
// neither (the port is then not probed).
func kubeletAddr(n *corev1.Node) string {
	port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port <= 0 {
		return ""
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return net.JoinHostPort(a.Address, strconv.Itoa(int(port)))
		}
	}
	return ""
}

// blockers names up to maxBlockers of what still ties work to the node, the
// most actionable first: pods the taint will never evict (they tolerate it),
// then other pods, then VolumeAttachments. Each group is sorted by name so
// Events are stable.
func blockers(tolerating, others []*podSummary, vas []*storagev1.VolumeAttachment) []string {
	if len(tolerating)+len(others)+len(vas) == 0 {
		return nil
	}
	byPodName := func(a, b *podSummary) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	}
	var out []string
	for _, group := range []struct {
		pods   []*podSummary
		suffix string
	}{{tolerating, " tolerates the out-of-service taint"}, {others, ""}} {
		slices.SortFunc(group.pods, byPodName)
		for _, p := range group.pods {
			if len(out) == maxBlockers {
				return out
			}
			out = append(out, "pod "+p.namespace+"/"+p.name+group.suffix)
		}
	}
	slices.SortFunc(vas, func(a, b *storagev1.VolumeAttachment) int { return cmp.Compare(a.Name, b.Name) })
	for _, va := range vas {
		if len(out) == maxBlockers {
			break
		}
		pv := "inline volume"
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = "PV " + *va.Spec.Source.PersistentVolumeName
		}
		out = append(out, fmt.Sprintf("VolumeAttachment %s (%s)", va.Name, pv))
	}
	return out
}
