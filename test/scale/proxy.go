//go:build scale

package scale

import (
	"net"
	"sync"
	"sync/atomic"
)

// countingProxy forwards TCP connections to the API server and counts the
// bytes each way: the agent's kubeconfig points at it, so what it counts is
// exactly the agent's traffic with the API server, as it crosses the
// network (TLS records, HTTP/2 frames, watch streams included). Requests are
// counted by the API server itself (apiRequests).
type countingProxy struct {
	ln       net.Listener
	upstream string
	// in: API server → agent; out: agent → API server.
	in, out atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// startProxy listens on 127.0.0.1 (a free port) and forwards to upstream
// (host:port). The API server's certificate names 127.0.0.1, so TLS
// verification holds through it.
func startProxy(upstream string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *countingProxy) Addr() string { return p.ln.Addr().String() }

// Bytes returns the bytes forwarded so far: to the agent, from the agent.
func (p *countingProxy) Bytes() (in, out int64) { return p.in.Load(), p.out.Load() }

func (p *countingProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(u, c, &p.out)
		go p.pipe(c, u, &p.in)
	}
}

// pipe copies src to dst, counting, and closes both when either side ends.
func (p *countingProxy) pipe(dst, src net.Conn, n *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n.Add(int64(k))
			if _, werr := dst.Write(buf[:k]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the copies.
func (p *countingProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
