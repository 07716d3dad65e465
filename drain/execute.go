package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/bmcfence/bmcfence/cluster"
)

// StatePending: a workload the drain had not started when it stopped.
const StatePending State = "pending"

// wrapUpTimeout bounds what Execute does after its own timeout (reading
// what is left, two Events): a few round trips; 30 s outlasts a slow API
// server without holding the CLI long after the timeout it asked for.
const wrapUpTimeout = 30 * time.Second

// Execute carries out a plan: it cordons the node and marks it in
// maintenance (one conflict-safe write; from then on the agent never fences
// it), records DrainStarted, moves the pods per plan with bounded
// parallelism, and records DrainCompleted or DrainIncomplete. It returns
// when everything moved, or when Options.Timeout passes, with a Report of
// what is left and why; an incomplete drain's error wraps ErrIncomplete.
// A refused plan (Plan.Err) changes nothing and returns ErrRefused.
//
// Execute is idempotent: on a half-drained node, plan again and execute
// again, and it continues (a Deployment already rolling is not restarted a
// second time; pods already gone count as moved).
//
// The plan's own Force and DeleteLocalData decided its actions; those
// fields of opts are not consulted again.
func Execute(ctx context.Context, client kubernetes.Interface, plan Plan, opts Options) (Report, error) {
	opts = opts.withDefaults()
	start := opts.Clock.Now()
	rep := Report{Node: plan.Node, StartedAt: start, Workloads: []WorkloadReport{}, Warnings: append([]string(nil), plan.Warnings...)}
	if plan.Node == "" {
		return rep, errors.New("execute: the plan names no node (make it with MakePlan)")
	}
	if err := plan.Err(); err != nil {
		rep.Elapsed = "0s"
		return rep, err
	}

	runCtx, cancel := withClockTimeout(ctx, opts.Clock, opts.Timeout, errDrainTimeout)
	defer cancel()
	node, mark, err := markMaintenance(runCtx, client, plan.Node, opts)
	if err != nil {
		return rep, fmt.Errorf("cordon %s and mark it in maintenance (nothing was moved): %w", plan.Node, err)
	}
	x := &executor{client: client, opts: opts, node: plan.Node, tasks: buildTasks(plan)}
	for _, t := range x.tasks {
		t.x = x
	}
	if err := recordEvent(runCtx, client, node, opts, corev1.EventTypeNormal, ReasonDrainStarted,
		fmt.Sprintf("Draining %s for maintenance%s: %s", plan.Node, who(opts), planSummary(plan))); err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
	}

	// A node that goes down stops the drain at once: its pods can no
	// longer leave by eviction, and the mark must not keep it from being
	// fenced until the timeout.
	workCtx, stopWork := context.WithCancelCause(runCtx)
	watched := x.watchReadiness(workCtx, stopWork, node)
	x.runAll(workCtx)
	nodeWentDown := context.Cause(workCtx) == errNodeDown //nolint:errorlint // our own sentinel, never wrapped
	stopWork(context.Canceled)
	<-watched

	// What is left is read and reported even when the timeout (or the
	// caller) ended runCtx.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), wrapUpTimeout)
	defer wcancel()
	rep.TimedOut = timedOut(runCtx)
	allDone := true
	for _, t := range x.tasks {
		wr := t.report()
		rep.Workloads = append(rep.Workloads, wr)
		if wr.State != StateDone {
			allDone = false
		}
	}
	left, err := x.leftovers(wctx)
	if err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
		allDone = false
	}
	rep.Left = left
	rep.Complete = allDone && len(left) == 0
	elapsed := opts.Clock.Since(start).Round(time.Millisecond)
	rep.Elapsed = elapsed.String()

	if rep.Complete {
		// The drain's hold on the node becomes the maintenance asked for:
		// until undrain, or MaintenanceFor.
		value, err := settleMark(wctx, client, plan.Node, mark, opts.MaintenanceFor)
		rep.MaintenanceFor = markFor(value)
		if err != nil {
			rep.MaintenanceFor = markFor(mark)
			return rep, fmt.Errorf("drained %s, but the maintenance mark could not be made to last (it lapses %s after bmcfence saw it; drain again to retry): %w",
				plan.Node, rep.MaintenanceFor, err)
		}
		if err := recordEvent(wctx, client, node, opts, corev1.EventTypeNormal, ReasonDrainCompleted,
			fmt.Sprintf("Drained %s in %s: %s", plan.Node, rep.Elapsed, doneSummary(rep))); err != nil {
			rep.Warnings = append(rep.Warnings, err.Error())
		}
		return rep, nil
	}
	why := incompleteSummary(rep)
	stopped := "after " + rep.Elapsed
	if rep.TimedOut {
		stopped = fmt.Sprintf("after %s (timeout %s)", rep.Elapsed, opts.Timeout)
	}

	// Work is left. On a node that is down it can never leave by
	// eviction, and a fence is what frees it: the mark goes, the cordon
	// stays.
	var releaseErr error
	if n, err := client.CoreV1().Nodes().Get(wctx, plan.Node, metav1.GetOptions{}); err != nil {
		releaseErr = fmt.Errorf("read the node to see whether it is down: %w", err)
	} else if rep.NodeDown = nodeWentDown || !cluster.NodeReady(n); rep.NodeDown {
		removed, err := releaseMark(wctx, client, plan.Node, mark)
		rep.Released = removed != "" && err == nil
		releaseErr = err
	}
	if !rep.Released {
		rep.MaintenanceFor = markFor(mark)
	}
	state := "it stays cordoned and in maintenance"
	switch {
	case rep.Released:
		state = "it is not Ready: its maintenance mark is removed so that bmcfence may fence it; it stays cordoned"
	case rep.NodeDown:
		state = "it is not Ready, and it stays in maintenance"
	case rep.MaintenanceFor != "":
		state = "it stays cordoned, and in maintenance until the mark lapses, " + rep.MaintenanceFor + " after bmcfence saw it"
	}
	if err := recordEvent(wctx, client, node, opts, corev1.EventTypeWarning, ReasonDrainIncomplete,
		fmt.Sprintf("Drain of %s incomplete %s; %s: %s", plan.Node, stopped, state, why)); err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
	}
	switch {
	case rep.Released:
		return rep, fmt.Errorf("%w %s: %w: %s was given back to fencing (maintenance mark removed, still cordoned): %s", ErrIncomplete, stopped, ErrNodeDown, plan.Node, why)
	case rep.NodeDown:
		return rep, fmt.Errorf("%w %s: %w, but its maintenance mark could not be removed, so bmcfence will not fence it until the mark lapses (%v): %s",
			ErrIncomplete, stopped, ErrNodeDown, releaseErr, why)
	case ctx.Err() != nil && !rep.TimedOut:
		return rep, fmt.Errorf("%w: interrupted %s: %s: %w", ErrIncomplete, stopped, why, ctx.Err())
	}
	if releaseErr != nil {
		rep.Warnings = append(rep.Warnings, releaseErr.Error())
	}
	return rep, fmt.Errorf("%w %s: %s (run the drain again to continue)", ErrIncomplete, stopped, why)
}

// markFor is how long a mark holds, as the report says it: "" for until
// undrain (or a value set by hand).
func markFor(mark string) string {
	m, err := cluster.DecodeMaintenance(mark)
	if err != nil || m.Expiry() == 0 {
		return ""
	}
	return m.Expiry().String()
}

// watchReadiness stops the drain (stop with errNodeDown) when the node,
// Ready when the drain began, is seen not Ready: the node lifecycle
// controller's verdict after its grace period (40-50 s without a
// heartbeat), not a blip. A node that was not Ready to begin with (a drain
// forced onto it) is not watched. The first watch starts before it returns
// (from n's resourceVersion: nothing after the mark is missed); the
// returned channel closes when the watching ends, after ctx.
func (x *executor) watchReadiness(ctx context.Context, stop context.CancelCauseFunc, n *corev1.Node) <-chan struct{} {
	done := make(chan struct{})
	if !cluster.NodeReady(n) {
		close(done)
		return done
	}
	rv := n.ResourceVersion
	sel := fields.OneTermEqualSelector("metadata.name", x.node).String()
	start := func() (watch.Interface, error) {
		return x.client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
	}
	w, err := start()
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err != nil {
				rv = ""
				if sleep(ctx, x.opts.Clock, x.opts.PollInterval) != nil {
					return
				}
				w, err = start()
				continue
			}
			if x.watchOnce(ctx, w, &rv) {
				stop(errNodeDown)
				return
			}
			w, err = start()
		}
	}()
	return done
}

// watchOnce reads w until it ends, ctx ends, or the node is seen not
// Ready (true). rv follows the last version seen ("" after an error: start
// again from the current one).
func (x *executor) watchOnce(ctx context.Context, w watch.Interface, rv *string) bool {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, open := <-w.ResultChan():
			if !open {
				return false
			}
			got, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Error {
				*rv = ""
				return false
			}
			*rv = got.ResourceVersion
			if got.Name == x.node && ev.Type != watch.Deleted && !cluster.NodeReady(got) {
				return true
			}
		}
	}
}

// executor runs a plan's tasks.
type executor struct {
	client kubernetes.Interface
	opts   Options
	node   string
	tasks  []*task

	progressMu sync.Mutex // Options.Progress is called one call at a time

	// ownerLocks serialise, per workload, the check that an eviction keeps
	// it within its bound and the eviction itself: two of its pods evicted
	// at once (separate tasks) must not both pass the check.
	ownerLocksMu sync.Mutex
	ownerLocks   map[string]*sync.Mutex
}

// lockOwner locks the workload key and returns its unlock.
func (x *executor) lockOwner(key string) func() {
	x.ownerLocksMu.Lock()
	if x.ownerLocks == nil {
		x.ownerLocks = map[string]*sync.Mutex{}
	}
	mu := x.ownerLocks[key]
	if mu == nil {
		mu = &sync.Mutex{}
		x.ownerLocks[key] = mu
	}
	x.ownerLocksMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// task moves one workload (a Deployment's rollout, a StatefulSet's pods in
// turn) or one pod.
type task struct {
	x        *executor
	workload string
	action   Action
	pods     []PodPlan
	run      func(ctx context.Context) error

	mu      sync.Mutex
	state   State
	message string
	// retryIn, when set, is when the task tries again: Progress shows it
	// after the message; the report, written when no retry will come,
	// does not.
	retryIn time.Duration
	started time.Time
	ended   time.Time
	// why holds, per pod, why it is still there; blockedBy the
	// PodDisruptionBudgets that refused its eviction.
	why       map[types.UID]string
	blockedBy map[types.UID][]string
}

// buildTasks groups the plan's pods into tasks, in plan order.
func buildTasks(plan Plan) []*task {
	var tasks []*task
	grouped := map[string]*task{}
	for _, pp := range plan.Pods {
		t := &task{action: pp.Action, pods: []PodPlan{pp}, state: StatePending, why: map[types.UID]string{}, blockedBy: map[types.UID][]string{}}
		switch pp.Action {
		case ActionRolloutRestart, ActionEvictOneAtATime:
			key := string(pp.Action) + "/" + pp.Namespace() + "/" + pp.Owner
			if g := grouped[key]; g != nil {
				g.pods = append(g.pods, pp)
				continue
			}
			grouped[key] = t
			t.workload = pp.ownerKind() + " " + pp.Namespace() + "/" + pp.ownerName()
			if pp.Action == ActionRolloutRestart {
				t.run = t.rollout
			} else {
				t.run = t.evictInTurn
			}
		case ActionEvict:
			t.workload = "Pod " + pp.Pod
			t.run = t.evictOne
		case ActionWait:
			t.workload = "Pod " + pp.Pod
			t.run = t.waitOne
		case ActionSkip, ActionRefuse:
			continue
		}
		tasks = append(tasks, t)
	}
	return tasks
}

// runAll starts the tasks in plan order, at most Parallelism at a time,
// and waits for them. When ctx ends, tasks not yet started stay pending.
func (x *executor) runAll(ctx context.Context) {
	notStarted := fmt.Sprintf("not started: the drain stopped while %d workloads at a time were moving", x.opts.Parallelism)
	var g errgroup.Group
	g.SetLimit(x.opts.Parallelism)
	for _, t := range x.tasks {
		if ctx.Err() != nil {
			t.set(StatePending, notStarted)
			continue
		}
		// Go waits for a free slot; the running tasks end soon after ctx
		// does, and a task whose turn came after it stays pending.
		g.Go(func() error {
			if ctx.Err() != nil {
				t.set(StatePending, notStarted)
				return nil
			}
			t.mu.Lock()
			t.started = x.opts.Clock.Now()
			t.mu.Unlock()
			t.set(StateStarted, t.startMessage())
			err := t.run(ctx)
			t.mu.Lock()
			t.ended = x.opts.Clock.Now()
			t.mu.Unlock()
			switch {
			case err == nil:
				t.set(StateDone, t.doneMessage())
			case ctx.Err() != nil:
				// Timed out or interrupted: the last message says what
				// it was waiting for (set drops the retry that will not come).
				t.set(StateWaiting, t.lastMessage())
			default:
				t.set(StateFailed, err.Error())
			}
			return nil // a task's failure is its state, not the drain's
		})
	}
	_ = g.Wait()
}

// set records the task's state and reports a change to Progress.
func (t *task) set(s State, msg string) { t.update(s, msg, 0) }

func (t *task) update(s State, msg string, retryIn time.Duration) {
	t.mu.Lock()
	changed := t.state != s || t.message != msg || t.retryIn != retryIn
	t.state, t.message, t.retryIn = s, msg, retryIn
	t.mu.Unlock()
	if !changed || t.x.opts.Progress == nil {
		return
	}
	if retryIn > 0 {
		msg = fmt.Sprintf("%s; retrying in %s", msg, retryIn)
	}
	t.x.progressMu.Lock()
	defer t.x.progressMu.Unlock()
	t.x.opts.Progress(Progress{At: t.x.opts.Clock.Now(), Workload: t.workload, Action: t.action, State: s, Message: msg})
}

func (t *task) waiting(format string, args ...any) { t.set(StateWaiting, fmt.Sprintf(format, args...)) }

// retrying says what the task waits for and that it tries again in backoff.
func (t *task) retrying(backoff time.Duration, format string, args ...any) {
	t.update(StateWaiting, fmt.Sprintf(format, args...), backoff)
}

// podWhy records why pod uid is still there (and who blocks it).
func (t *task) podWhy(uid types.UID, why string, blockedBy []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.why[uid] = why
	t.blockedBy[uid] = blockedBy
}

func (t *task) lastMessage() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.message
}

func (t *task) startMessage() string {
	switch t.action {
	case ActionRolloutRestart:
		return fmt.Sprintf("rollout restart of %d pod(s) on %s", len(t.pods), t.x.node)
	case ActionEvictOneAtATime:
		return fmt.Sprintf("evicting %d pod(s) one at a time", len(t.pods))
	case ActionEvict:
		return "evicting"
	case ActionWait:
		return "waiting for it to terminate"
	case ActionSkip, ActionRefuse:
	}
	return string(t.action)
}

func (t *task) doneMessage() string {
	switch t.action {
	case ActionRolloutRestart:
		return "successfully rolled out; its pods left " + t.x.node
	case ActionEvictOneAtATime:
		return fmt.Sprintf("%d pod(s) evicted one at a time, within its strategy", len(t.pods))
	case ActionEvict:
		return "evicted"
	case ActionWait:
		return "gone"
	case ActionSkip, ActionRefuse:
	}
	return "done"
}

func (t *task) report() WorkloadReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	wr := WorkloadReport{Workload: t.workload, Action: t.action, State: t.state, Message: t.message}
	for _, p := range t.pods {
		wr.Pods = append(wr.Pods, p.Pod)
	}
	if !t.started.IsZero() && !t.ended.IsZero() {
		wr.Elapsed = t.ended.Sub(t.started).Round(time.Millisecond).String()
	}
	return wr
}

// leftovers lists the pods still on the node that should have moved, with
// the reason their task last gave.
func (x *executor) leftovers(ctx context.Context) ([]LeftPod, error) {
	list, err := x.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: podsOnNodeSelector(x.node)})
	if err != nil {
		return nil, fmt.Errorf("list the pods left on %s: %w", x.node, err)
	}
	owners := map[types.UID]*task{}
	planned := map[types.UID]PodPlan{}
	for _, t := range x.tasks {
		for _, p := range t.pods {
			owners[p.UID] = t
			planned[p.UID] = p
		}
	}
	var left []LeftPod
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != x.node || staysOnNode(pod) {
			continue
		}
		lp := LeftPod{Pod: podKey(pod)}
		t := owners[pod.UID]
		if t == nil {
			if ref := metav1.GetControllerOf(pod); ref != nil {
				lp.Owner = ref.Kind + "/" + ref.Name
			}
			lp.Reason = "not in the plan (it arrived after the plan was made): plan and run the drain again"
			left = append(left, lp)
			continue
		}
		lp.Owner = planned[pod.UID].Owner
		t.mu.Lock()
		lp.Reason = t.why[pod.UID]
		lp.BlockedBy = t.blockedBy[pod.UID]
		if lp.Reason == "" {
			lp.Reason = t.message
		}
		if t.state == StatePending {
			lp.Reason = t.message
		}
		t.mu.Unlock()
		if pod.DeletionTimestamp != nil && lp.Reason == "" {
			lp.Reason = "terminating: waiting for its kubelet to confirm"
		}
		left = append(left, lp)
	}
	sort.Slice(left, func(i, j int) bool { return left[i].Pod < left[j].Pod })
	return left, nil
}

// staysOnNode: pods a drain leaves where they are (see decide).
func staysOnNode(pod *corev1.Pod) bool {
	if pod.Annotations[corev1.MirrorPodAnnotationKey] != "" || finished(pod) {
		return true
	}
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == "DaemonSet"
}

// ---- summaries for Events and errors ----

func planSummary(p Plan) string {
	var parts []string
	for _, a := range []Action{ActionRolloutRestart, ActionEvictOneAtATime, ActionEvict, ActionWait, ActionSkip} {
		if n := p.Count(a); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	if len(parts) == 0 {
		return "no pods"
	}
	return strings.Join(parts, ", ")
}

func doneSummary(r Report) string {
	counts := map[Action]int{}
	for _, w := range r.Workloads {
		counts[w.Action] += len(w.Pods)
	}
	var parts []string
	for _, a := range []Action{ActionRolloutRestart, ActionEvictOneAtATime, ActionEvict, ActionWait} {
		if counts[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d pod(s) %s", counts[a], a))
		}
	}
	if len(parts) == 0 {
		return "nothing to move"
	}
	return strings.Join(parts, ", ")
}

// incompleteSummary names what is left: pods and their reasons, then
// workloads that did not finish though their pods left.
func incompleteSummary(r Report) string {
	const show = 5
	var parts []string
	for i, l := range r.Left {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(r.Left)-show))
			break
		}
		parts = append(parts, l.Pod+": "+l.Reason)
	}
	for _, w := range r.Workloads {
		if w.State != StateDone && len(parts) < show+1 && !anyLeft(r.Left, w.Pods) {
			parts = append(parts, w.Workload+": "+w.Message)
		}
	}
	if len(parts) == 0 {
		return "unknown (see warnings)"
	}
	return fmt.Sprintf("%d pod(s) left: %s", len(r.Left), strings.Join(parts, "; "))
}

func anyLeft(left []LeftPod, pods []string) bool {
	for _, l := range left {
		for _, p := range pods {
			if l.Pod == p {
				return true
			}
		}
	}
	return false
}

// isGone reports whether the planned pod no longer exists: not found, or
// the name now belongs to another pod (a StatefulSet's replacement).
func isGone(pod *corev1.Pod, err error, uid types.UID) bool {
	return apierrors.IsNotFound(err) || (err == nil && pod.UID != uid)
}
