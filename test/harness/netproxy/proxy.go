// Package netproxy is a TCP proxy a test can cut: paused, it forwards no
// byte in either direction and holds every connection, old and new, as a
// network partition would (or, dropping, resets them all), until resumed.
package netproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed on Resume
	conns  map[net.Conn]struct{}
	closed bool
}

// Start listens on a free local port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, resume: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.resume)
	go p.serve()
	return p, nil
}

// Addr is host:port to connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pause stops forwarding. With drop, every open connection is closed too
// (clients see resets); without, they hang as on a silent network.
func (p *Proxy) Pause(drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resume = make(chan struct{})
	}
	if drop {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// Resume forwards again; held bytes flow on.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.Resume()
	return p.ln.Close()
}

// gate blocks while paused; it returns false once the proxy is closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.resume, p.closed
	p.mu.Unlock()
	<-ch
	return !closed
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(in)
	}
}

func (p *Proxy) handle(in net.Conn) {
	p.track(in, true)
	defer p.track(in, false)
	defer in.Close()
	if !p.gate() {
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.track(out, true)
	defer p.track(out, false)
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { p.pipe(out, in); done <- struct{}{} }()
	go func() { p.pipe(in, out); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst, waiting at the gate before each chunk it forwards.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			if tcp, ok := dst.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
			}
			return
		}
	}
}
