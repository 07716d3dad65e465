package redfish

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/bmcfence/bmcfence/bmc"
)

// ResetType values the adapter sends.
const (
	resetForceOff        = "ForceOff"
	resetOn              = "On"
	resetForceOn         = "ForceOn"
	resetPushPowerButton = "PushPowerButton"
)

// Busy retries: the first wait, its growth, and its cap. iDRAC's SYS518
// clears within a few seconds of the previous operation; doubling from a
// quarter second reaches that in a handful of attempts, and the cap keeps
// a long operation timeout from turning into a few huge sleeps.
const (
	busyFirstWait = 250 * time.Millisecond
	busyMaxWait   = 2 * time.Second
)

// taskFirstPoll and taskPoll are the waits before the first and every
// later task monitor read when the BMC gives no Retry-After: a power task
// often ends within a fraction of a second, and polling a slower one twice
// a second costs the BMC little.
const (
	taskFirstPoll = 100 * time.Millisecond
	taskPoll      = 500 * time.Millisecond
)

// PowerOff sends ComputerSystem.Reset ForceOff, always: never a cycle or a
// restart, and never skipped because the system reads Off. A system that
// does not allow ForceOff is refused with ErrUnsupported before anything is
// sent: no other ResetType is a hard off.
func (c *Client) PowerOff(ctx context.Context) (bmc.Result, error) {
	return c.reset(ctx, bmc.OpPowerOff)
}

// PowerOn sends ComputerSystem.Reset On, or ForceOn where On is not allowed
// (Supermicro and Lenovo list both, some only ForceOn). PushPowerButton is
// used only when it is the one way in and the system reads Off: pushed on a
// system that is on, it would turn it off.
func (c *Client) PowerOn(ctx context.Context) (bmc.Result, error) {
	return c.reset(ctx, bmc.OpPowerOn)
}

func (c *Client) reset(ctx context.Context, op bmc.Op) (bmc.Result, error) {
	var res bmc.Result
	err := c.run(ctx, op, &res, func(cn *conn) error {
		sys, uri, target, allowed, err := cn.resetAction()
		if err != nil {
			return err
		}
		rt, err := cn.chooseReset(op, allowed)
		if err != nil {
			return err
		}
		if op == bmc.OpPowerOff && sys != nil {
			// Right before our ForceOff, while the system answers: the
			// identity that identifies it if it answers 503 once its host
			// is off (AMI multi-system BMCs), bound to its BMC and chassis.
			id := bmc.Identity{AllowedResets: allowed}
			identityOf(sys, &id)
			cn.bind(uri, id)
		}
		res.Sent = "ComputerSystem.Reset " + rt
		return cn.post(target, rt, &res)
	})
	return res, err
}

// resetAction reads the system and finds its Reset target and allowed
// ResetTypes. A system that cannot be read because it answers 503 (AMI
// multi-node BMCs do while the host is off) is reset through the target
// DSP0266 derives from its URI, allowed values unknown, sys nil: the
// command must still go out.
func (cn *conn) resetAction() (sys *systemDoc, uri, target string, allowed []string, err error) {
	sys, uri, err = cn.system()
	if _, ok := unavailable503(err, uri); ok {
		cn.c.sawUnavailable(uri)
		return nil, uri, uri + "/Actions/ComputerSystem.Reset", nil, nil
	}
	if err != nil {
		return nil, "", "", nil, err
	}
	target = uri + "/Actions/ComputerSystem.Reset"
	if r := sys.Actions.Reset; r != nil && r.Target != "" {
		target = r.Target
	}
	allowed, err = cn.allowedResets(sys)
	if err != nil {
		return nil, "", "", nil, err
	}
	return sys, uri, target, allowed, nil
}

// chooseReset picks the ResetType for op from what the system allows (all,
// when it advertises nothing).
func (cn *conn) chooseReset(op bmc.Op, allowed []string) (string, error) {
	may := func(rt string) bool { return len(allowed) == 0 || slices.Contains(allowed, rt) }
	if op == bmc.OpPowerOff {
		if may(resetForceOff) {
			return resetForceOff, nil
		}
		return "", fmt.Errorf("%w: the system offers no hard off (ResetType ForceOff; it allows %s); nothing was sent: a graceful shutdown, cycle or button press may leave it on",
			bmc.ErrUnsupported, strings.Join(allowed, ", "))
	}
	switch {
	case may(resetOn):
		return resetOn, nil
	case may(resetForceOn):
		return resetForceOn, nil
	case may(resetPushPowerButton):
		st, err := cn.powerStatus()
		if err != nil {
			return "", err
		}
		if st.State != bmc.PowerOff {
			return "", fmt.Errorf("%w: the system reads %s and offers only PushPowerButton to power on, which would turn it off; nothing was sent",
				bmc.ErrAlreadyInState, st.State)
		}
		return resetPushPowerButton, nil
	}
	return "", fmt.Errorf("%w: the system offers no way to power on (it allows %s); nothing was sent", bmc.ErrUnsupported, strings.Join(allowed, ", "))
}

// post sends the Reset and reads its answer: 200/204 accepted, 202 followed
// through its task monitor, busy answers retried with backoff while the
// operation's time allows, "already in that state" answers reported as
// bmc.ErrAlreadyInState. No If-Match is sent: an action is not a change to
// the resource an ETag describes (RFC 7232 §3.1), and iDRAC10 answers 412 to
// one (gofish PR 510, 512).
func (cn *conn) post(target, rt string, res *bmc.Result) error {
	wait := busyFirstWait
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		resp, err := cn.request(http.MethodPost, target, map[string]string{"ResetType": rt}, true)
		if err != nil {
			return err
		}
		switch {
		case resp.status == http.StatusAccepted:
			res.Reply = ""
			return cn.followTask(resp)
		case resp.ok():
			res.Reply = ""
			return nil
		}
		herr := newHTTPError(http.MethodPost, target, resp, cn.c.target.Credentials)
		res.Reply = cn.c.redact(herr.Error())
		switch {
		case herr.busy():
			next := wait
			if herr.retryAfter > 0 {
				next = herr.retryAfter
			}
			// Leave the last part of the operation's time unused rather
			// than sleep into the deadline and learn nothing.
			if next >= remaining(cn.ctx)-busyFirstWait {
				return &busyError{fmt.Sprintf("%v: %s %s answered %s; still busy after %d attempts", bmc.ErrBusy, http.MethodPost, target, herr, attempt)}
			}
			if err := sleep(cn.ctx, next); err != nil {
				return err
			}
			wait = min(2*wait, busyMaxWait)
		case herr.already():
			return fmt.Errorf("%w: %s %s answered %s", bmc.ErrAlreadyInState, rt, target, herr)
		default:
			return herr
		}
	}
}

// busyError is a command the BMC kept refusing as busy. It is both
// bmc.ErrBusy (what happened) and bmc.ErrBMC (who refused).
type busyError struct{ msg string }

func (e *busyError) Error() string { return e.msg }
func (e *busyError) Is(target error) bool {
	return target == bmc.ErrBusy || target == bmc.ErrBMC
}

// taskDoc is the part of a Redfish Task the adapter reads.
type taskDoc struct {
	ODataID     string `json:"@odata.id"`
	TaskMonitor string `json:"TaskMonitor"`
	TaskState   string `json:"TaskState"`
	TaskStatus  string `json:"TaskStatus"`
	Messages    []struct {
		MessageID string `json:"MessageId"`
		Message   string `json:"Message"`
	} `json:"Messages"`
}

// followTask follows a 202's task monitor (DSP0266 "Asynchronous
// operations": GET it until it stops answering 202) to completion, or until
// the operation's time runs out.
func (cn *conn) followTask(accepted *response) error {
	monitor := accepted.header.Get("Location")
	var task taskDoc
	if json.Unmarshal(accepted.body, &task) == nil && monitor == "" {
		monitor = task.TaskMonitor
		if monitor == "" {
			monitor = task.ODataID
		}
	}
	if monitor == "" {
		return nil // accepted, and nothing to follow
	}
	wait := retryAfter(accepted.header, taskFirstPoll)
	for polls := 0; ; polls++ {
		if err := sleep(cn.ctx, min(wait, remaining(cn.ctx))); err != nil {
			return fmt.Errorf("%w: the BMC accepted the command (202) but its task at %s did not complete in time", context.DeadlineExceeded, monitor)
		}
		resp, err := cn.request(http.MethodGet, monitor, nil, true)
		if err != nil {
			return err
		}
		if resp.status != http.StatusAccepted {
			// A monitor redirected elsewhere (a front page, another task)
			// says nothing about our command's task.
			if err := checkRedirected(http.MethodGet, monitor, resp); err != nil {
				return err
			}
		}
		switch {
		case resp.status == http.StatusAccepted:
			wait = retryAfter(resp.header, taskPoll)
			continue
		case resp.status == http.StatusNotFound && polls > 0:
			// DSP0266 lets a service delete a monitor once its task is
			// done. Only a later reading proves anything either way.
			return nil
		case !resp.ok():
			return newHTTPError(http.MethodGet, monitor, resp, cn.c.target.Credentials)
		}
		var t taskDoc
		if json.Unmarshal(resp.body, &t) != nil || t.TaskState == "" {
			return nil // the operation's own (empty) answer: done
		}
		switch t.TaskState {
		case "Completed":
			if t.TaskStatus == "Critical" {
				return fmt.Errorf("%w: the task at %s completed with status Critical: %s", bmc.ErrBMC, monitor, taskMessages(t))
			}
			return nil
		case "Exception", "Killed", "Cancelled", "Interrupted":
			return fmt.Errorf("%w: the task at %s ended %s: %s", bmc.ErrBMC, monitor, t.TaskState, taskMessages(t))
		default: // New, Starting, Running, Pending, Suspended, Stopping, Cancelling, Service
			wait = retryAfter(resp.header, taskPoll)
		}
	}
}

func taskMessages(t taskDoc) string {
	var parts []string
	for _, m := range t.Messages {
		parts = append(parts, strings.TrimSpace(m.MessageID+" "+m.Message))
	}
	if len(parts) == 0 {
		return "no message"
	}
	// Not made one line here: classify redacts the error text first, then
	// makes it one line (a passphrase with two spaces in a row).
	return strings.Join(parts, "; ")
}

func retryAfter(h http.Header, def time.Duration) time.Duration {
	var n int
	if _, err := fmt.Sscanf(h.Get("Retry-After"), "%d", &n); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, busyMaxWait*2)
	}
	return def
}
