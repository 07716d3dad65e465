package timeline

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// The SVG's geometry, in user units (the viewBox). One column of labels,
// the time axis, one column of notes; below them one row per action or
// request, so that no two labels can overlap whatever the times.
const (
	svgWidth  = 1100.0
	margin    = 12.0
	plotX0    = 170.0 // the time axis starts here; phase names end before it
	plotX1    = 730.0
	notesX    = 742.0
	rowH      = 22.0
	barH      = 12.0
	fontSize  = 12.0
	smallSize = 11.0
	titleSize = 16.0
	// charEm is the advance of one character of DejaVu Sans Mono (1233
	// of 2048 units) with some slack for another monospace font: every
	// text is monospace, so its width is known before a browser draws it.
	charEm = 0.62
)

// textWidth estimates the width of s at size.
func textWidth(s string, size float64) float64 {
	return float64(utf8.RuneCountInString(s)) * size * charEm
}

// fit cuts s to at most width at size, marking the cut.
func fit(s string, size, width float64) string {
	n := int(width / (size * charEm))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// phaseColors: warm while the machine may still run, dark once it is off,
// green on the way back.
var phaseColors = map[string]string{
	"Suspect":       "#d97706",
	"PoweringOff":   "#dc2626",
	"ConfirmingOff": "#ea580c",
	"Tainting":      "#7c3aed",
	"Detaching":     "#2563eb",
	"Fenced":        "#4b5563",
	"PoweringOn":    "#16a34a",
	"Recovering":    "#0d9488",
	"Untainting":    "#65a30d",
	"Stuck":         "#be123c",
	"Maintenance":   "#64748b",
	"Healthy":       "#15803d",
}

// powerColor colours a reading: an Off that counts, On (the machine runs),
// anything else (a failure, a transition).
func powerColor(r Reading) string {
	switch {
	case r.Power == "Off" && r.Note == "":
		return "#111827"
	case r.Power == "On":
		return "#dc2626"
	default:
		return "#d97706"
	}
}

type svgWriter struct {
	b strings.Builder
}

func (s *svgWriter) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func esc(v string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(v))
	return b.String()
}

// text writes one label. class names what it is (the browser test finds
// labels by it); full, when the label was cut to fit, becomes its tooltip.
func (s *svgWriter) text(class string, x, y, size float64, anchor, fill, label, full string, attrs ...string) {
	s.printf(`<text class="%s" x="%.1f" y="%.1f" font-size="%g" text-anchor="%s" fill="%s"`, class, x, y, size, anchor, fill)
	for i := 0; i+1 < len(attrs); i += 2 {
		s.printf(` %s="%s"`, attrs[i], esc(attrs[i+1]))
	}
	s.printf(">%s", esc(label))
	if full != "" && full != label {
		s.printf("<title>%s</title>", esc(full))
	}
	s.printf("</text>\n")
}

// SVG writes the fence as a standalone SVG image: the header, the two
// witnesses and every phase as bars on one time axis, the BMC's readings
// as ticks, and one labelled row per action, result, request and refusal,
// in time order. Wall-clock times are printed in loc.
func SVG(w io.Writer, f Fence, loc *time.Location) error {
	total := max(f.End.Sub(f.Start), time.Second)
	x := func(t time.Time) float64 {
		v := plotX0 + float64(t.Sub(f.Start))/float64(total)*(plotX1-plotX0)
		return math.Round(min(max(v, plotX0), plotX1)*10) / 10
	}
	sec := func(t time.Time) string { return fmt.Sprintf("%d", int(t.Sub(f.Start).Round(time.Second)/time.Second)) }

	var phaseRows []string
	seen := map[string]bool{}
	for _, p := range f.Phases {
		if !seen[p.Name] {
			seen[p.Name] = true
			phaseRows = append(phaseRows, p.Name)
		}
	}
	const headerH = 70.0
	axisY := headerH + 14
	top := axisY + 12
	rowY := func(i int) float64 { return top + float64(i)*rowH }
	// Rows: 2 witnesses, the phases, the readings; then a heading and
	// one row per mark.
	readingsRow := 2 + len(phaseRows)
	marksHead := rowY(readingsRow+1) + 20
	marksTop := marksHead + 8
	height := marksTop + float64(len(f.Marks))*rowH + margin
	plotBottom := rowY(readingsRow + 1)

	s := &svgWriter{}
	title := fmt.Sprintf("Fence of node %s (record %s)", f.Node, f.Record)
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" width="%g" height="%g" role="img" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace">`+"\n",
		svgWidth, height, svgWidth, height)
	s.printf("<title>%s</title>\n", esc(title))
	s.printf(`<rect x="0" y="0" width="%g" height="%g" fill="#ffffff"/>`+"\n", svgWidth, height)

	// Header: what, who asked and why, how it ended.
	inner := svgWidth - 2*margin
	s.text("title", margin, 24, titleSize, "start", "#111827", fit(title, titleSize, inner), title, "font-weight", "bold")
	asked := fmt.Sprintf("%s, asked by %s: %s", f.Trigger, orDash(f.RequestedBy), orDash(f.Reason))
	s.text("asked", margin, 44, fontSize, "start", "#374151", fit(asked, fontSize, inner), asked)
	state := "outcome " + orDash(f.Outcome)
	if f.Open {
		state = "under way"
	}
	when := fmt.Sprintf("%s; started %s (the last sign of life the agent saw), lasted %s", state, f.Start.In(loc).Format("2006-01-02 15:04:05 MST"), since(f.Start, f.End))
	s.text("when", margin, 62, fontSize, "start", "#374151", fit(when, fontSize, inner), when)

	// The time axis, its grid through every row.
	step := tickStep(total, 7)
	for d := time.Duration(0); d <= total; d += step {
		t := f.Start.Add(d)
		anchor := "middle"
		if d == 0 {
			anchor = "start"
		}
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e7eb"/>`+"\n", x(t), axisY+4, x(t), plotBottom)
		s.text("axis", x(t), axisY, smallSize, anchor, "#6b7280", "+"+d.String(), "")
	}

	bar := func(i int, from, to time.Time, color, tip string) {
		x0, x1 := x(from), x(to)
		wd := max(x1-x0, 2)
		s.printf(`<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%g" fill="%s"><title>%s</title></rect>`+"\n",
			x0, rowY(i)+(rowH-barH)/2, wd, barH, color, esc(tip))
	}
	label := func(i int, class, name string, t time.Time) {
		s.text(class, plotX0-8, rowY(i)+rowH/2+4, fontSize, "end", "#111827", fit(name, fontSize, plotX0-8-margin), name, "data-t", sec(t))
	}
	note := func(i int, class, n string) {
		s.text(class, notesX, rowY(i)+rowH/2+4, smallSize, "start", "#374151", fit(n, smallSize, svgWidth-margin-notesX), n)
	}

	// The first witness: the Lease silent on the agent's clock.
	sil := f.Silence
	label(0, "witness-label", "Lease silent", sil.From)
	bar(0, sil.From, sil.To, "#6366f1", fmt.Sprintf("no renewal of the node's Lease seen by the agent from %s to %s", f.Offset(sil.From), f.Offset(sil.To)))
	note(0, "witness-note", fmt.Sprintf("%s → %s: %s", f.Offset(sil.From), f.Offset(sil.To), f.SilenceNote()))
	// The second: a settled Off after our accepted ForceOff.
	if o := f.Off; o != nil {
		label(1, "witness-label", o.Name, o.From)
		bar(1, o.From, o.To, "#111827", offNote(f, o))
		if !o.ForceOffAt.IsZero() {
			fx, cy := x(o.ForceOffAt), rowY(1)+rowH/2
			s.printf(`<path class="forceoff" d="M %.1f %.1f l 6 6 l -6 6 l -6 -6 z" fill="#dc2626"><title>our ForceOff, accepted by the BMC at %s</title></path>`+"\n",
				fx, cy-6, esc(f.Offset(o.ForceOffAt)))
		}
		n := fmt.Sprintf("%d Off reads over %s, %s", o.Reads, since(o.From, o.To), o.How)
		if o.Reads == 0 {
			n = o.How
		}
		note(1, "witness-note", n)
	} else {
		label(1, "witness-label", "Off settled", f.End)
		note(1, "witness-note", "none: this fence never reached the taint")
	}

	// The phases, one row each, in the order they were first entered.
	for i, name := range phaseRows {
		row := 2 + i
		var first time.Time
		var spent time.Duration
		for _, p := range f.Phases {
			if p.Name != name {
				continue
			}
			if first.IsZero() {
				first = p.From
			}
			spent += p.Duration()
			color := phaseColors[name]
			if color == "" {
				color = "#6b7280"
			}
			bar(row, p.From, p.To, color, fmt.Sprintf("%s from %s to %s", name, f.Offset(p.From), f.Offset(p.To)))
		}
		label(row, "phase-label", name, first)
		note(row, "phase-note", fmt.Sprintf("from %s, %s", f.Offset(first), spent.Round(time.Second)))
	}

	// The BMC's readings as ticks; a run of identical ones as a line
	// between its first and last read.
	label(readingsRow, "readings-label", "BMC readings", f.Start)
	cy := rowY(readingsRow) + rowH/2
	for _, r := range f.Readings {
		c := powerColor(r)
		tip := fmt.Sprintf("%s: BMC reads %s", f.Offset(r.At), r.Power)
		if r.Note != "" {
			tip += ": " + r.Note
		}
		if r.Count > 1 {
			tip += fmt.Sprintf(" (%d reads until %s)", r.Count, f.Offset(r.Until))
			s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x(r.At), cy, x(r.Until), cy, c)
		}
		for _, t := range []time.Time{r.At, r.Until} {
			s.printf(`<line class="reading" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"><title>%s</title></line>`+"\n",
				x(t), cy-7, x(t), cy+7, c, esc(tip))
			if r.Count <= 1 {
				break
			}
		}
	}
	lx := notesX
	for _, l := range []struct{ name, color string }{{"Off", "#111827"}, {"On", "#dc2626"}, {"other", "#d97706"}} {
		s.printf(`<rect x="%.1f" y="%.1f" width="3" height="12" fill="%s"/>`+"\n", lx, cy-6, l.color)
		s.text("legend", lx+7, cy+4, smallSize, "start", l.color, l.name, "")
		lx += 7 + textWidth(l.name, smallSize) + 16
	}

	// The marks: one row each, a dot at its time on the axis and its
	// label beside it, right of the dot when it fits, else left of it.
	s.text("section", margin, marksHead, fontSize, "start", "#111827", "Actions, results and requests", "", "font-weight", "bold")
	markY := func(i int) float64 { return marksTop + float64(i)*rowH + rowH/2 }
	// The guides first, so that no guide crosses a label drawn later.
	for i, m := range f.Marks {
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d1d5db" stroke-dasharray="2 3"/>`+"\n", x(m.At), plotBottom, x(m.At), markY(i))
	}
	for i, m := range f.Marks {
		y, mx := markY(i), x(m.At)
		color := "#374151"
		switch m.Kind {
		case MarkRequest:
			color = "#7c3aed"
		case MarkRefusal:
			color = "#be123c"
		case MarkAction, MarkResult:
		}
		s.printf(`<circle class="mark" cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", mx, y, color)
		full := fmt.Sprintf("%s %s", f.Offset(m.At), m.Label)
		shown := full
		if m.Who != "" {
			full += " (" + m.Who + ")"
		}
		right := svgWidth - margin - (mx + 9)
		left := mx - 9 - margin
		// Who goes first when the label does not fit: the time and what
		// happened matter most (the tooltip keeps all of it).
		if room := max(left, right); textWidth(full, fontSize) <= room {
			shown = full
		}
		text, anchor, tx := fit(shown, fontSize, right), "start", mx+9
		if textWidth(shown, fontSize) > right && left > right {
			text, anchor, tx = fit(shown, fontSize, left), "end", mx-9
		}
		// A white halo keeps the label legible over the guides.
		s.text("mark-label", tx, y+4, fontSize, anchor, color, text, full, "data-t", sec(m.At), "data-kind", string(m.Kind),
			"stroke", "#ffffff", "stroke-width", "4", "paint-order", "stroke")
	}
	s.printf("</svg>\n")
	_, err := io.WriteString(w, s.b.String())
	return err
}
