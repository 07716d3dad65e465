// Package powerevents holds the leader's event streams: one Redfish SSE
// stream per BMC (iDRAC9 allows two connections in all, so never one per
// node), started when the agent leads and stopped when it stops leading.
// It tells the runner each node's latest power-off event (runner.PowerEvents)
// and pokes the node's worker when one arrives. An event never proves
// anything by itself: the engine may only start a fence sooner on it
// (docs/safety.md, "Power events"). A BMC without a stream, or whose stream
// is down, is polled as before, and its state says why.
package powerevents

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/bmcfence/bmcfence/bmc"
	"github.com/bmcfence/bmcfence/bmc/redfish"
	"github.com/bmcfence/bmcfence/fence"
)

// DefaultRefresh is how often the nodes' targets are read again: new BMCs
// get a stream, gone ones lose theirs.
const DefaultRefresh = 30 * time.Second

// Options configure a Manager.
type Options struct {
	Clock clock.WithTicker
	Log   *zap.Logger
	// Targets lists each node's BMC target now (the inventory). Only
	// Redfish targets stream; the others are polled.
	Targets func() map[string]bmc.Target
	// Notify pokes a node's worker: an event for its BMC arrived.
	Notify func(node string)
	// OnState is called after any stream's state changed (the metric);
	// it must not block.
	OnState func()
	// OnStream, when set, is told when a BMC's stream becomes connected
	// or falls back to polling (not of every reconnect attempt), with the
	// nodes on that BMC: the agent says so on each Node, for `kubectl
	// fence status`. It must not block for long.
	OnStream func(nodes []string, st redfish.StreamState)
	// Refresh overrides DefaultRefresh.
	Refresh time.Duration
}

// Manager holds the streams. Its zero value is not usable: New.
type Manager struct {
	opts Options

	mu      sync.Mutex
	streams map[string]*stream // by BMC address
	nodes   map[string]nodeRef
	// counts is how many of streams are in each mode, kept as their
	// states change (Counts is called on every change of any stream: a
	// walk of every stream each time cost 5% of the agent's CPU at 300
	// BMCs).
	counts map[redfish.StreamMode]int
}

type nodeRef struct {
	bmc    string // the stream's key
	system string // the node's system URI, as events name it ("" until resolved)
}

type stream struct {
	s      *redfish.Stream
	target bmc.Target
	cancel context.CancelFunc
	done   chan struct{}
	// last is the latest power-off event, of any system of this BMC; gap
	// is the ConnectedAt of a connection that reported lost events.
	last fence.PowerEvent
	gap  time.Time
	// announced is the mode last told to OnStream.
	announced redfish.StreamMode
	// counted is the mode this stream adds to Manager.counts while it is
	// in Manager.streams (live).
	counted redfish.StreamMode
	live    bool
}

// New returns a Manager; Run starts its streams.
func New(opts Options) *Manager {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	return &Manager{opts: opts, streams: map[string]*stream{}, nodes: map[string]nodeRef{}, counts: map[redfish.StreamMode]int{}}
}

// Run keeps one stream per Redfish BMC until ctx ends (the agent stops
// leading), then stops them all and returns.
func (m *Manager) Run(ctx context.Context) {
	defer m.stopAll()
	for {
		m.reconcile(ctx)
		t := m.opts.Clock.NewTimer(m.opts.Refresh)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// key names a stream: one per BMC and account. A BMC that gives each of its
// systems its own account (a multi-node chassis, the testbed's mock) shows
// an account only its own system's events, so each account needs its own
// stream; the usual BMC, one machine and one account, gets one.
func key(t bmc.Target) string {
	return fmt.Sprintf("%s://%s@%s:%d", t.Address.Scheme, t.Credentials.Username, t.Address.Host, t.Address.Port)
}

// reconcile starts the streams of new BMCs, stops those of BMCs no node
// names any more, and resolves each node's system URI.
func (m *Manager) reconcile(ctx context.Context) {
	targets := m.opts.Targets()
	want := map[string]bmc.Target{}
	nodes := map[string]nodeRef{}
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	m.mu.Lock()
	old := m.nodes
	m.mu.Unlock()
	for _, n := range names {
		t := targets[n]
		if t.Address.Protocol != bmc.Redfish {
			continue
		}
		k := key(t)
		if _, ok := want[k]; !ok {
			want[k] = t
		}
		ref := nodeRef{bmc: k}
		if o, ok := old[n]; ok && o.bmc == k && o.system != "" {
			ref.system = o.system
		} else if uri, err := m.systemURI(ctx, t); err == nil {
			ref.system = uri
		} else if ctx.Err() == nil {
			m.opts.Log.Info("cannot resolve the node's Redfish system for its power events; polling only until it resolves",
				zap.String("node", n), zap.Error(err))
		}
		nodes[n] = ref
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(nodes) != len(m.nodes) || len(want) != len(m.streams) {
		m.opts.Log.Info("BMC event streams", zap.Int("bmcs", len(want)), zap.Int("nodes", len(nodes)), zap.Int("targets", len(targets)))
	}
	m.nodes = nodes
	for k, s := range m.streams {
		if _, ok := want[k]; !ok {
			s.cancel()
			delete(m.streams, k)
			m.uncount(s)
		}
	}
	for k, t := range want {
		if _, ok := m.streams[k]; ok || ctx.Err() != nil {
			continue
		}
		s := &stream{target: t, done: make(chan struct{})}
		rs, err := redfish.NewStream(t, redfish.StreamOptions{Clock: m.opts.Clock, OnState: func(st redfish.StreamState) { m.streamState(k, s, st) }})
		if err != nil {
			m.opts.Log.Warn("cannot prepare the BMC's event stream; polling only", zap.String("bmc", k), zap.Error(err))
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		s.s, s.cancel = rs, cancel
		m.streams[k] = s
		s.live, s.counted = true, rs.State().Mode
		m.counts[s.counted]++
		go func() {
			defer close(s.done)
			_ = rs.Run(sctx, func(e redfish.PowerEvent) { m.heard(k, e) })
			m.changed()
		}()
	}
	go m.changed()
}

// streamState takes a state change of BMC k's stream from.
func (m *Manager) streamState(k string, from *stream, st redfish.StreamState) {
	m.mu.Lock()
	m.recount(from)
	var tell []string
	if s := m.streams[k]; s != nil && (st.Mode == redfish.StreamConnected || st.Mode == redfish.StreamPolling) && st.Mode != s.announced {
		s.announced = st.Mode
		for n, ref := range m.nodes {
			if ref.bmc == k {
				tell = append(tell, n)
			}
		}
		sort.Strings(tell)
	}
	m.mu.Unlock()
	m.changed()
	if len(tell) > 0 {
		m.opts.Log.Info("BMC event stream "+string(st.Mode), zap.String("bmc", k), zap.String("uri", st.URI),
			zap.String("reason", st.Reason), zap.Int("nodes", len(tell)))
	}
	if len(tell) > 0 && m.opts.OnStream != nil {
		m.opts.OnStream(tell, st)
	}
}

// recount moves a live stream's count to the mode it is in now (read
// again, not taken from the callback: two changes' callbacks may arrive out
// of order, and the last callback then still counts the last mode). A
// stream no longer in m.streams (stopped, or replaced by a new stream for
// the same BMC) counts nowhere. m.mu is held.
func (m *Manager) recount(s *stream) {
	if !s.live {
		return
	}
	if now := s.s.State().Mode; now != s.counted {
		m.counts[s.counted]--
		m.counts[now]++
		s.counted = now
	}
}

// uncount takes a stream out of the counts; m.mu is held.
func (m *Manager) uncount(s *stream) {
	if s.live {
		m.counts[s.counted]--
		s.live = false
	}
}

func (m *Manager) changed() {
	if m.opts.OnState != nil {
		m.opts.OnState()
	}
}

// systemURI resolves the node's system as events name it.
func (m *Manager) systemURI(ctx context.Context, t bmc.Target) (string, error) {
	c, err := redfish.New(t)
	if err != nil {
		return "", err
	}
	defer c.CloseIdleConnections()
	return c.SystemURI(ctx)
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	streams := m.streams
	m.streams = map[string]*stream{}
	m.nodes = map[string]nodeRef{}
	for _, s := range streams {
		m.uncount(s)
	}
	m.mu.Unlock()
	for _, s := range streams {
		s.cancel()
		<-s.done
	}
	m.changed()
}

// heard takes one event of BMC k's stream.
func (m *Manager) heard(k string, e redfish.PowerEvent) {
	m.mu.Lock()
	s := m.streams[k]
	if s == nil {
		m.mu.Unlock()
		return
	}
	switch {
	case e.Kind == redfish.EventGap:
		s.gap = e.ConnectedAt
	case powerOff(e):
		s.last = fence.PowerEvent{System: e.System, Received: e.Received, ConnectedAt: e.ConnectedAt,
			Replay: e.Replay, AfterGap: !s.gap.IsZero() && s.gap.Equal(e.ConnectedAt)}
	default:
		m.mu.Unlock()
		return
	}
	var poke []string
	for n, ref := range m.nodes {
		if ref.bmc == k {
			poke = append(poke, n)
		}
	}
	m.mu.Unlock()
	m.opts.Log.Info("BMC power event", zap.String("bmc", k), zap.String("system", e.System), zap.String("kind", string(e.Kind)),
		zap.String("messageId", e.MessageID), zap.Bool("replay", e.Replay))
	if m.opts.Notify != nil {
		for _, n := range poke {
			m.opts.Notify(n)
		}
	}
}

// powerOff: the event says its system lost power. iDRAC says so with its
// "System is turning off" alert (SYS1001, a power loss included), which
// the client reads as poweringOff; the ResourceEvent registry's
// ResourcePoweringOff is an orderly shutdown's start, not yet an off.
func powerOff(e redfish.PowerEvent) bool {
	switch e.Kind {
	case redfish.EventPoweredOff:
		return true
	case redfish.EventPoweringOff:
		return strings.HasPrefix(e.MessageID, "SYS") || strings.Contains(e.MessageID, ".SYS")
	default:
		return false
	}
}

// OffEvent implements runner.PowerEvents.
func (m *Manager) OffEvent(node string) (fence.PowerEvent, string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ref, ok := m.nodes[node]
	if !ok {
		return fence.PowerEvent{}, "", false
	}
	s := m.streams[ref.bmc]
	if s == nil {
		return fence.PowerEvent{}, "", false
	}
	return s.last, ref.system, true
}

// NodeState is the state of the stream of the node's BMC, for `kubectl
// fence status`; ok is false when its BMC has none (not Redfish, or not
// leading).
func (m *Manager) NodeState(node string) (redfish.StreamState, bool) {
	m.mu.Lock()
	ref, ok := m.nodes[node]
	s := m.streams[ref.bmc]
	m.mu.Unlock()
	if !ok || s == nil {
		return redfish.StreamState{}, false
	}
	return s.s.State(), true
}

// Counts is how many streams are in each mode (the metric
// bmcfence_event_streams{state}).
func (m *Manager) Counts() map[redfish.StreamMode]int {
	out := map[redfish.StreamMode]int{redfish.StreamConnecting: 0, redfish.StreamConnected: 0, redfish.StreamPolling: 0}
	m.mu.Lock()
	defer m.mu.Unlock()
	for mode, n := range m.counts {
		if n != 0 {
			out[mode] = n
		}
	}
	return out
}
