package timeline

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
	"github.com/bmcfence/bmcfence/cluster/history"
)

// plotCols is the width of the terminal chart's time axis, in columns: with
// a 17-column label and the notes beside it, a chart fits 120 columns.
const plotCols = 50

// Text writes the fence for a terminal: a header (what, who asked, the
// outcome), the witnesses and phases as bars on one time axis, the BMC's
// readings as ticks under them, then every entry with its time after the
// start. Wall-clock times are printed in loc.
func Text(w io.Writer, f Fence, loc *time.Location) error {
	var b strings.Builder
	fmt.Fprintf(&b, "record %s: the fence of node %s\n", f.Record, f.Node)
	fmt.Fprintf(&b, "trigger %s, asked by %s: %s\n", f.Trigger, orDash(f.RequestedBy), orDash(f.Reason))
	state := "outcome " + orDash(f.Outcome)
	if f.Open {
		state = "under way"
	}
	fmt.Fprintf(&b, "%s; started %s (the last sign of life the agent saw), lasted %s\n\n", state, f.Start.In(loc).Format("2006-01-02 15:04:05 MST"), since(f.Start, f.End))

	ax := newAxis(f.Start, f.End, plotCols)
	labelW := len("Lease silent") + 5
	for _, p := range f.Phases {
		labelW = max(labelW, len(p.Name)+2)
	}
	row := func(label, plot, note string) {
		fmt.Fprintf(&b, "%-*s%s  %s", labelW, label, plot, note)
		b.WriteString("\n")
	}
	ticks, marks := ax.ticks()
	row("", ticks, "")
	row("", marks, "")
	row("Lease silent", ax.bar(f.Silence.From, f.Silence.To), fmt.Sprintf("%s → %s: %s", f.Offset(f.Silence.From), f.Offset(f.Silence.To), f.SilenceNote()))
	if o := f.Off; o != nil {
		row(o.Name, ax.bar(o.From, o.To), offNote(f, o))
	} else {
		row("Off settled", strings.Repeat(" ", plotCols), "none: this fence never reached the taint")
	}
	for _, p := range f.Phases {
		row(p.Name, ax.bar(p.From, p.To), fmt.Sprintf("%s, %s", f.Offset(p.From), since(p.From, p.To)))
	}
	row("BMC reads", ax.readings(f.Readings), "○ Off  ● On  ? other")
	b.WriteString("\n")

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tPHASE\tKIND\tWHO\tWHAT")
	fmt.Fprintf(tw, "%s\t-\t-\t-\tthe node's last sign of life the agent saw: the Lease's silence begins\n", f.Offset(f.Start))
	for _, e := range f.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Offset(e.Time.Time), orDash(e.Phase), e.Kind, orDash(e.Who), f.describe(e))
	}
	if !f.Open {
		fmt.Fprintf(tw, "%s\t-\t-\t-\trecord closed: %s\n", f.Offset(f.End), orDash(f.Outcome))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// No line ends in blanks (the chart's rows are padded).
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}

// describe is an entry in words: actions as an operator says them
// ("ForceOff accepted by the BMC"), a run of readings with its end as an
// offset like every other time here.
func (f Fence) describe(e v1alpha1.TimelineEntry) string {
	switch e.Kind {
	case v1alpha1.EntryAction:
		_, label := action(e.Message)
		return label
	case v1alpha1.EntryReading:
		r, ok := history.ParseReading(e.Message)
		if !ok || r.Count <= 1 {
			return e.Message
		}
		n, until := r.Count, r.Until
		r.Count = 1
		return fmt.Sprintf("%s (x%d, the last at %s)", r, n, f.Offset(until))
	case v1alpha1.EntryDecision, v1alpha1.EntryRequest:
	}
	return e.Message
}

// offNote says what the Off witness rests on.
func offNote(f Fence, o *OffWitness) string {
	if o.Reads == 0 {
		return fmt.Sprintf("%s: %s", f.Offset(o.To), o.How)
	}
	s := fmt.Sprintf("%s → %s: %d Off reads over %s, %s", f.Offset(o.From), f.Offset(o.To), o.Reads, since(o.From, o.To), o.How)
	if !o.ForceOffAt.IsZero() {
		s += " at " + f.Offset(o.ForceOffAt)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// axis maps times onto cols columns.
type axis struct {
	start time.Time
	total time.Duration
	cols  int
}

func newAxis(start, end time.Time, cols int) axis {
	return axis{start: start, total: max(end.Sub(start), time.Second), cols: cols}
}

func (a axis) col(t time.Time) int {
	c := int(float64(t.Sub(a.start)) / float64(a.total) * float64(a.cols-1))
	return min(max(c, 0), a.cols-1)
}

// tickStep is the first of the usual steps that puts at most max ticks
// on the axis.
func tickStep(total time.Duration, maxTicks int) time.Duration {
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour} {
		if int(total/s) < maxTicks {
			return s
		}
	}
	return (total/time.Duration(maxTicks) + time.Hour - 1).Truncate(time.Hour) + time.Hour
}

// ticks returns the tick labels and the tick marks, each cols wide.
func (a axis) ticks() (labels, marks string) {
	lab := []rune(strings.Repeat(" ", a.cols+8))
	mk := []rune(strings.Repeat("─", a.cols))
	step := tickStep(a.total, 6)
	for d := time.Duration(0); d <= a.total; d += step {
		c := a.col(a.start.Add(d))
		mk[c] = '┼'
		copy(lab[c:], []rune(d.String()))
	}
	mk[0] = '├'
	return strings.TrimRight(string(lab), " "), string(mk)
}

// bar draws [from, to] as a run of blocks, one at least.
func (a axis) bar(from, to time.Time) string {
	row := []rune(strings.Repeat(" ", a.cols))
	c0, c1 := a.col(from), a.col(to)
	for c := c0; c <= max(c0, c1-1); c++ {
		row[c] = '█'
	}
	return string(row)
}

// readings puts a mark where each reading was taken (a collapsed run at
// its first and last read, joined by dots); a column with On shows On, a
// contradiction is never hidden behind an Off.
func (a axis) readings(rs []Reading) string {
	row := []rune(strings.Repeat(" ", a.cols))
	rank := func(r rune) int {
		switch r {
		case '●':
			return 3
		case '?':
			return 2
		case '○':
			return 1
		default:
			return 0
		}
	}
	put := func(c int, r rune) {
		if rank(r) >= rank(row[c]) {
			row[c] = r
		}
	}
	for _, r := range rs {
		sym := '?'
		switch {
		case r.Power == "Off" && r.Note == "":
			sym = '○'
		case r.Power == "On":
			sym = '●'
		}
		c0, c1 := a.col(r.At), a.col(r.Until)
		for c := c0 + 1; c < c1; c++ {
			if row[c] == ' ' {
				row[c] = '·'
			}
		}
		put(c0, sym)
		put(c1, sym)
	}
	return string(row)
}
