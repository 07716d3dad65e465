//go:build !bmcfast

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/cluster"
	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/fence/runner"
)

// requestFlags are shared by fence, confirm, abort and unfence.
type requestFlags struct {
	reason  string
	yes     bool
	dryRun  bool
	timeout time.Duration
	powerOn bool
	force   bool
	out     outputFormat
}

func (f *requestFlags) register(cmd *cobra.Command, timeout time.Duration, reasonRequired bool) {
	usage := "why (recorded in the node's fence history and Events)"
	if reasonRequired {
		usage += "; required"
	}
	cmd.Flags().StringVar(&f.reason, "reason", "", usage)
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "say what would happen; change nothing")
	cmd.Flags().DurationVar(&f.timeout, "timeout", timeout, "stop waiting after this long (the agent, if running, carries on)")
	f.out = outTable
	cmd.Flags().VarP(&f.out, "output", "o", "output format: table, json or yaml")
}

// requestSpec describes one of the four commands.
type requestSpec struct {
	kind   fence.CommandKind
	prompt string // confirmation question; "" for none
	// done reports whether the request finished, successfully (err nil) or
	// not, from the node's state after the request was acknowledged.
	done func(s fence.State, taint fence.TaintState) (bool, error)
}

var requests = map[string]requestSpec{
	"fence": {kind: fence.CmdFence, prompt: "Fence %s: send our own ForceOff, confirm Off, taint it out-of-service?",
		done: func(s fence.State, _ fence.TaintState) (bool, error) {
			switch s.Phase {
			case fence.Fenced:
				return true, nil
			case fence.Stuck:
				switch s.Stuck {
				case fence.StuckPowerOffIgnored:
					return true, withCode(exitNotOff, errors.New("the BMC accepted ForceOff but never read Off; nothing was tainted (it may ignore commands)"))
				case fence.StuckContradiction:
					return true, withCode(exitRefused, errors.New("the node renewed its Lease after the BMC accepted our ForceOff: the BMC is not this node's, or reports a cached state; nothing was tainted (check the inventory)"))
				}
				return true, withCode(exitRefused, errors.New("the fence was aborted"))
			}
			return false, nil
		}},
	"confirm": {kind: fence.CmdConfirm, prompt: "You attest %s is off, and it will be tainted out-of-service without its BMC's proof. Continue?",
		done: func(s fence.State, _ fence.TaintState) (bool, error) { return s.Phase == fence.Fenced, nil }},
	"abort": {kind: fence.CmdAbort,
		done: func(s fence.State, _ fence.TaintState) (bool, error) {
			return s.Phase == fence.Stuck && s.Stuck == fence.StuckAborted, nil
		}},
	"unfence": {kind: fence.CmdUnfence, prompt: "Unfence %s: remove our out-of-service taint once it is Ready with a fresh heartbeat?",
		done: func(s fence.State, taint fence.TaintState) (bool, error) {
			return s.Phase == fence.Healthy && taint != fence.TaintOurs, nil
		}},
}

// requestReport is the output of the four commands.
type requestReport struct {
	Node      string `json:"node"`
	Command   string `json:"command"`
	By        string `json:"by"`
	HandledBy string `json:"handledBy"`
	Phase     string `json:"phase"`
	Tainted   bool   `json:"tainted"`
	Elapsed   string `json:"elapsed"`
	Message   string `json:"message,omitempty"`
	DryRun    bool   `json:"dryRun,omitempty"`
}

func newRequestCmd(s streams, k *kubeFlags, name, short, long, example string, timeout time.Duration) *cobra.Command {
	spec := requests[name]
	var f requestFlags
	cmd := &cobra.Command{
		Use:     name + " NODE",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (spec.kind == fence.CmdFence || spec.kind == fence.CmdConfirm) && strings.TrimSpace(f.reason) == "" {
				return usageError("--reason is required: say why, it goes in the node's history")
			}
			return runRequest(cmd.Context(), s, k, args[0], spec, name, f)
		},
	}
	f.register(cmd, timeout, spec.kind == fence.CmdFence || spec.kind == fence.CmdConfirm)
	if spec.kind == fence.CmdUnfence {
		cmd.Flags().BoolVar(&f.powerOn, "power-on", false, "power the node on through its BMC first")
	}
	if spec.kind == fence.CmdConfirm {
		cmd.Flags().BoolVar(&f.force, "force", false, "attest even against a live witness (the node renewed its Lease, or its BMC reads On); needs --reason")
	}
	return cmd
}

// runRequest hands the request to the agent when one leads, else drives the
// same runner and engine here, for this one node, until done or timeout.
func runRequest(ctx context.Context, s streams, k *kubeFlags, node string, spec requestSpec, name string, f requestFlags) error {
	sess, n, err := openNode(ctx, k, node)
	if err != nil {
		return err
	}
	leader, err := sess.agentLeader(ctx)
	if err != nil {
		return err
	}
	handler := "this kubectl-fence (no bmcfence agent is running)"
	if leader != "" {
		handler = "the bmcfence agent " + leader
	}
	report := requestReport{Node: node, Command: name, By: sess.user, HandledBy: handler}
	if f.dryRun {
		st, taint, err := nodeState(n)
		if err != nil {
			return err
		}
		report.DryRun, report.Phase, report.Tainted = true, st.Phase.String(), taint != fence.TaintAbsent
		report.Message = fmt.Sprintf("would ask %s to %s %s; nothing was changed", handler, name, node)
		return printRequest(s, f.out, report)
	}
	if spec.prompt != "" {
		prompt := fmt.Sprintf(spec.prompt, node)
		if f.powerOn {
			prompt = fmt.Sprintf("Unfence %s: power it on through its BMC, then remove our out-of-service taint once it is Ready with a fresh heartbeat?", node)
		}
		if err := confirm(s, f.yes, prompt); err != nil {
			return err
		}
	}
	prog := newProgress(s)
	id, err := writeRequest(ctx, sess, node, spec, f)
	if err != nil {
		return err
	}
	prog.say("request %s created for %s; handled by %s", id, node, handler)

	var r *runner.Runner
	var localTaken atomic.Bool
	if leader == "" {
		if err := sess.startView(ctx); err != nil {
			return err
		}
		// No agent: this process runs the engine for the node and takes
		// the request in itself (setting its status is the agent's grant,
		// not a user's), then deletes it, so that an agent started later
		// never takes it again (and one that did would refuse it: it
		// predates the agent's watch of the admission policy).
		//
		// The agent's admission rule (requests.Guard: the policy that
		// checks requestedBy in force from before the request until it is
		// taken) is not applied here, and need not be: it keeps a writer
		// from borrowing the agent's rights under someone else's name,
		// while this process takes only the command it was given, in the
		// name the API server gives its caller (whoAmI), and acts with the
		// caller's own credentials, which must already read the BMC's
		// Secret and patch and taint the Node.
		defer func() {
			_ = sess.fencing.FencingV1alpha1().BMCFenceRequests().Delete(context.WithoutCancel(ctx), id, metav1.DeleteOptions{})
		}()
		sess.view.OnRequestTaken(func(_, taken string) {
			if taken == id {
				localTaken.Store(true)
			}
		})
		sess.view.SetRequest(node, id, fence.Command{Kind: spec.kind, User: sess.user, Reason: f.reason, PowerOn: f.powerOn, Force: f.force, SeenAt: time.Now()})
		r, err = runner.New(runner.Options{
			Policy: sess.cfg.Policy, Clock: clock.RealClock{}, Cluster: sess.view, Inventory: sess.inv,
			Log: zap.NewNop(), BMCConcurrency: 1, VerifyInterval: sess.cfg.BMC.ProbeInterval,
		})
		if err != nil {
			return err
		}
	}
	start := time.Now()
	// The timeout bounds the waiting and the engine's work; reads of the
	// node use the caller's context, so the last look at the timeout is
	// not itself cut short.
	timed, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var last fence.Phase = 255
	for {
		wait := time.Second
		if r != nil {
			after, _ := r.Sync(timed, node)
			wait = min(after, wait)
		}
		// One read a tick: the state, the taint and the acknowledgement.
		n, err := sess.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil && ctx.Err() == nil {
			return err
		} else if err != nil {
			n = nil // interrupted: the timeout below reports it
		}
		st, taint, err := nodeState(n)
		if err != nil {
			return err
		}
		report.Phase, report.Tainted, report.Elapsed = st.Phase.String(), taint != fence.TaintAbsent, time.Since(start).Round(100*time.Millisecond).String()
		if st.Phase != last {
			prog.say("%6s  %s", report.Elapsed, st.Phase)
			last = st.Phase
		}
		acked := localTaken.Load()
		if !acked && leader != "" {
			taken, rerr := requestOutcome(ctx, sess, id)
			if rerr != nil {
				report.Message = rerr.Error()
				_ = printRequest(s, f.out, report)
				return withCode(exitRefused, rerr)
			}
			acked = taken
		}
		if acked {
			if msg := refusal(st); msg != "" {
				report.Message = msg
				_ = printRequest(s, f.out, report)
				return withCode(exitRefused, errors.New(msg))
			}
			if finished, ferr := spec.done(st, taint); finished {
				if ferr == nil {
					report.Message = lastEventMessage(ctx, sess, node, start)
				}
				if perr := printRequest(s, f.out, report); perr != nil {
					return perr
				}
				return ferr
			}
		}
		select {
		case <-timed.Done():
			report.Message = timeoutMessage(st, acked, leader != "")
			_ = printRequest(s, f.out, report)
			if ctx.Err() == nil {
				// The engine says when it cannot read the BMC (its
				// readings live in memory, the Event on the node), once
				// per failure: look from the failure's start when it was
				// said before this request.
				since := start
				if !st.FailureStart.IsZero() && st.FailureStart.Before(since) {
					since = st.FailureStart
				}
				for _, e := range nodeEvents(ctx, sess, node, since) {
					if e.Reason == "FenceCannotVerify" {
						return withCode(exitUnreachable, fmt.Errorf("%s: the BMC cannot be read: %s", report.Message, e.Message))
					}
				}
				return withCode(exitFailed, errors.New(report.Message))
			}
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func timeoutMessage(st fence.State, acked, agent bool) string {
	switch {
	case !acked && agent:
		return "the agent has not picked the request up yet"
	case !acked:
		return "the request was not processed"
	}
	msg := fmt.Sprintf("still %s after the timeout", st.Phase)
	if agent {
		msg += "; the agent carries on (kubectl fence history shows the evidence)"
	}
	return msg
}

// writeRequest creates the BMCFenceRequest. The API server admits it only
// when spec.requestedBy is the caller (as SelfSubjectReview named them) and
// the caller holds the grant for the action; its refusal names the missing
// grant. Whoever runs the engine for the node (the agent, or this process
// when none runs) takes it in, and the agent records the outcome in its
// status.
func writeRequest(ctx context.Context, sess *session, node string, spec requestSpec, f requestFlags) (string, error) {
	action, err := requestAction(spec.kind)
	if err != nil {
		return "", err
	}
	req := &v1alpha1.BMCFenceRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-" + string(action) + "-"},
		Spec: v1alpha1.BMCFenceRequestSpec{
			NodeName: node, Action: action, RequestedBy: sess.user, Reason: f.reason, PowerOn: f.powerOn, Force: f.force,
		},
	}
	created, err := sess.fencing.FencingV1alpha1().BMCFenceRequests().Create(ctx, req, metav1.CreateOptions{FieldManager: "kubectl-fence"})
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		return "", withCode(exitRefused, fmt.Errorf("the API server refused the %s request for %s by %s: %w", action, node, sess.user, err))
	}
	if err != nil {
		return "", fmt.Errorf("creating the %s request for node %s: %w", action, node, err)
	}
	return created.Name, nil
}

func requestAction(k fence.CommandKind) (v1alpha1.RequestAction, error) {
	switch k {
	case fence.CmdFence:
		return v1alpha1.ActionFence, nil
	case fence.CmdConfirm:
		return v1alpha1.ActionConfirm, nil
	case fence.CmdAbort:
		return v1alpha1.ActionAbort, nil
	case fence.CmdUnfence:
		return v1alpha1.ActionUnfence, nil
	case fence.CmdNone:
	}
	return "", fmt.Errorf("%v is not a request", k)
}

// requestOutcome reads the request's status: taken says the engine took it
// in; a refusal or expiry comes back as an error with the agent's message.
func requestOutcome(ctx context.Context, sess *session, id string) (taken bool, err error) {
	r, err := sess.fencing.FencingV1alpha1().BMCFenceRequests().Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return false, nil // read again next tick
	}
	switch r.Status.Outcome {
	case v1alpha1.OutcomeTaken:
		return true, nil
	case v1alpha1.OutcomeRefused, v1alpha1.OutcomeExpired:
		return false, fmt.Errorf("request %s %s: %s", id, strings.ToLower(string(r.Status.Outcome)), r.Status.Message)
	case v1alpha1.OutcomePending, "":
	}
	return false, nil
}

// nodeState decodes a node's fence state and taint; a nil node (not read)
// has neither.
func nodeState(n *corev1.Node) (fence.State, fence.TaintState, error) {
	if n == nil {
		return fence.State{}, fence.TaintAbsent, nil
	}
	taint := cluster.TaintStateOf(n)
	raw := n.Annotations[cluster.AnnotationState]
	if raw == "" {
		return fence.State{}, taint, nil
	}
	st, err := fence.Decode(raw)
	if err != nil {
		return fence.State{}, taint, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return st, taint, nil
}

// refusal returns the engine's refusal of the newest command in the
// node's evidence (ours, read with its acknowledgement), if it refused it:
// the engine records a refusal right after the command.
func refusal(st fence.State) string {
	recs := st.Evidence.Records()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Kind != fence.RecCommand {
			continue
		}
		if i+1 < len(recs) && recs[i+1].Kind == fence.RecRefusal {
			return recs[i].Note + ": refused: " + recs[i+1].Note
		}
		return ""
	}
	return ""
}

func lastEventMessage(ctx context.Context, sess *session, node string, since time.Time) string {
	evs := nodeEvents(ctx, sess, node, since)
	if len(evs) == 0 {
		return ""
	}
	return evs[len(evs)-1].Message
}

func printRequest(s streams, out outputFormat, r requestReport) error {
	return printObject(s.Out, out, r, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "NODE\tCOMMAND\tHANDLED BY\tPHASE\tTAINTED\tELAPSED\tMESSAGE")
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\n", r.Node, r.Command, shortHandler(r.HandledBy), r.Phase, r.Tainted, dash(r.Elapsed), dash(r.Message))
	})
}

func shortHandler(h string) string {
	if strings.HasPrefix(h, "this kubectl-fence") {
		return "kubectl-fence"
	}
	return strings.TrimPrefix(h, "the bmcfence ")
}
