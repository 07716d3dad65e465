package fence

import "time"

// The power-loss path's latency (docs/safety.md, "Power events", "The
// taint at the floor"). With a power-off event the ForceOff and the settle
// run during the Lease's silence; the taint's floor is then the Lease
// witness alone (SuspectAfter of silence on our clock). Two waits that were
// not the floor are cut, and no rule changes:
//
//   - a power-loss fence (the machine read exactly Off, or its outlets drew
//     nothing, before our ForceOff) reads back as soon as the BMC accepted
//     the ForceOff, not a PowerPollInterval later: the Off run still begins
//     after our accepted ForceOff and still needs SettleReads reads over
//     SettleWindow;
//   - a settled run that waits only for the Lease's silence reads again at
//     the moment the silence reaches SuspectAfter, not on the next settle
//     tick: the taint still rests on a fresh reading taken then, the Lease
//     witness is judged on it, and the runner's server recheck precedes the
//     write as before.

// readBackAtOnce: after the BMC accepted our ForceOff of a power-loss fence,
// the read-back is due now.
func (st *stepper) readBackAtOnce() bool {
	return st.s.PowerLoss && st.s.PowerOffAccepted && st.forceOffSent()
}

// silenceLeft is how long until the Lease witness of silentLongEnough(true)
// holds, or 0 when it holds (or cannot be reached by waiting: a NotReady
// fence before its ForceOff).
func (st *stepper) silenceLeft() time.Duration {
	if !Enabled(CheckLeaseWitness) || st.forced() {
		return 0
	}
	silent := SilentFor(st.node(), st.now)
	if st.s.NotReadyFence && !st.s.Attested {
		if !Enabled(CheckNotReadyLease) || !st.forceOffSent() {
			return 0
		}
		silent = min(silent, st.now.Sub(st.s.PowerOffAt))
	}
	return max(st.p.SuspectAfter-silent, 0)
}

// taintReadAfter is when to read again when a settled run's taint was not
// admitted: at the moment the Lease's silence reaches SuspectAfter if that
// is sooner than the settle cadence, else on the cadence (a storm, a stale
// view: nothing to time).
func (st *stepper) taintReadAfter() time.Duration {
	d := st.p.SettleInterval()
	if left := st.silenceLeft(); left > 0 && left < d {
		return left
	}
	return d
}
