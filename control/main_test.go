package control

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestMain starts one throwaway PostgreSQL cluster for the package and
// checks for leaked goroutines after the run.
func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore opens and migrates a Store on a fresh database, closed at
// cleanup. It returns the database's URL too.
func newStore(t testing.TB, o Options) (*Store, string) {
	t.Helper()
	url := pgtest.URL(t)
	s := openStore(t, url, o)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, url
}

// openStore opens a Store, closed at cleanup.
func openStore(t testing.TB, url string, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// connect opens a plain connection, closed at cleanup.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// at returns 2026-09-28 at hh:mm UTC.
func at(hh, mm int) time.Time {
	return time.Date(2026, 9, 28, hh, mm, 0, 0, time.UTC)
}

// proxy forwards TCP connections to a PostgreSQL server. Close breaks
// every forwarded connection and refuses new ones: to the client, the
// server is gone. Freeze silences the connections open now without closing
// them, as a dropped network path would. Lag delays what every connection
// forwards, as a slow server on a loaded machine would.
type proxy struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*pipe
	lag   atomic.Int64 // nanoseconds each forwarded read waits
}

// pipe is one forwarded connection.
type pipe struct {
	client, server net.Conn
	frozen         chan struct{} // closed by freeze
	freezeOnce     sync.Once
	lag            *atomic.Int64 // the proxy's
}

func (p *pipe) freeze() { p.freezeOnce.Do(func() { close(p.frozen) }) }

// forward copies from src to dst until either fails or the pipe is frozen,
// after which what src sends is dropped.
func (p *pipe) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			if err != nil {
				return
			}
			continue
		default:
		}
		if n > 0 {
			if lag := time.Duration(p.lag.Load()); lag > 0 {
				time.Sleep(lag)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			pp := &pipe{client: c, server: s, frozen: make(chan struct{}), lag: &p.lag}
			p.mu.Lock()
			p.conns = append(p.conns, pp)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); pp.forward(s, c) }()
			go func() { defer p.wg.Done(); pp.forward(c, s) }()
		}
	}()
	t.Cleanup(p.Close)
	return p
}

func (p *proxy) Addr() string { return p.l.Addr().String() }

// Freeze silences every connection open now; later ones work.
func (p *proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.freeze()
	}
}

// Lag delays by d each read every connection forwards from now on (0: none).
func (p *proxy) Lag(d time.Duration) { p.lag.Store(int64(d)) }

// Close stops accepting, breaks every connection and waits for the
// forwarding goroutines; safe twice.
func (p *proxy) Close() {
	_ = p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
