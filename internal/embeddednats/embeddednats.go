// Package embeddednats runs the in-process nats-server with JetStream that
// `finalizer serve` uses when no external NATS URL is given. Its log lines go
// to zap.
package embeddednats

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// The embedded server's per-stream ingest buffer, above nats-server's
// defaults (100,000 messages, 128 MiB) so that a burst of plain publishes
// (Spark drivers publish without JetStream acknowledgements) is stored, not
// dropped.
const (
	DefaultStreamMaxBufferedMsgs = 1_000_000
	DefaultStreamMaxBufferedSize = 1 << 30 // 1 GiB
)

// Defaults for Options.
const (
	// DefaultHost is the address the server listens on when Options.Host is
	// empty: loopback only.
	DefaultHost = "127.0.0.1"
	// DefaultPort is the client port when Options.Port is 0.
	DefaultPort = 4222
	// RandomPort, as Options.Port, lets the operating system pick a free port
	// (tests); ClientURL reports the chosen one.
	RandomPort = -1
	// DefaultServerName is the server's name when Options.ServerName is empty.
	DefaultServerName = "finalizer"
	// DefaultReadyTimeout bounds how long Start waits for the server to
	// accept connections.
	DefaultReadyTimeout = 10 * time.Second
)

// Errors returned by Start.
var (
	// ErrNoStoreDir is returned when Options.StoreDir is empty.
	ErrNoStoreDir = errors.New("embedded nats: a JetStream store directory is required")
	// ErrStoreInUse is returned when another process (or another Server of
	// this one) holds the store directory.
	ErrStoreInUse = errors.New("embedded nats: store directory is in use by another server")
	// ErrNotReady is returned when the server did not become ready for
	// connections within Options.ReadyTimeout.
	ErrNotReady = errors.New("embedded nats: server not ready for connections")
)

// Options configure Start. The zero value of every field except StoreDir
// means its default.
type Options struct {
	// Host is the interface to listen on; "" means DefaultHost.
	Host string
	// Port is the client port; 0 means DefaultPort and RandomPort (-1)
	// lets the operating system choose.
	Port int
	// StoreDir is the directory of JetStream's file store. It is required:
	// a restart on the same directory keeps every stream and message. Only
	// one Server at a time may use it.
	StoreDir string
	// Logger receives the server's own log lines; nil discards them.
	Logger *zap.Logger
	// ServerName names the server (in logs and JetStream); "" means
	// DefaultServerName.
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections;
	// 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Users, when not empty, turn authentication on: every client must log
	// in as one of them. Empty means anyone who can connect may publish
	// and subscribe to anything.
	Users []User
	// TLS, when set, makes every client connection use TLS; ClientURL then
	// starts with tls://.
	TLS *TLS
}

// Server is a running in-process nats-server with JetStream.
type Server struct {
	ns     *server.Server
	log    *zap.Logger
	unlock func()
	once   sync.Once
}

// Start starts a nats-server with JetStream enabled, storing under
// o.StoreDir, and returns once it accepts client connections. It returns an
// error naming the address when the server cannot listen (for example the
// port is in use) or is not ready within o.ReadyTimeout, ErrStoreInUse
// when the store directory is held by another server, and ErrBadAuth (or
// a TLS file error) when o.Users or o.TLS cannot be used.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, ErrNoStoreDir
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.ServerName == "" {
		o.ServerName = DefaultServerName
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))

	// Fail fast and clearly when the port is taken: nats-server itself
	// only logs it and then never becomes ready.
	if o.Port != RandomPort {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: cannot listen: %w", err)
		}
		_ = ln.Close()
	}

	sopts := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		// A stream's ingest queue drops plainly published messages (no
		// error reaches the publisher) once it holds more than this; the
		// server's defaults (100,000 messages, 128 MiB, about 64,000 progress
		// documents) were reached by a flood of 200,000 in finalizer bench.
		StreamMaxBufferedMsgs: DefaultStreamMaxBufferedMsgs,
		StreamMaxBufferedSize: DefaultStreamMaxBufferedSize,
		// HTTP monitoring, cluster, leafnodes and websockets stay off.
	}
	if err := applyAuth(o, sopts); err != nil {
		return nil, err
	}

	unlock, err := lockStoreDir(o.StoreDir)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(sopts)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("embedded nats: configure server on %s: %w", addr, err)
	}
	log := o.Logger.With(zap.String("component", "nats-server"))
	zl := &zapLogger{log: log.WithOptions(zap.AddCallerSkip(3))}
	ns.SetLoggerV2(zl, log.Core().Enabled(zap.DebugLevel), false, false)

	ns.Start()
	if err := waitReady(ns, zl, o.ReadyTimeout); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		unlock()
		return nil, fmt.Errorf("embedded nats on %s: %w", addr, err)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		unlock()
		return nil, fmt.Errorf("embedded nats on %s: jetstream did not start (store %s)", addr, o.StoreDir)
	}
	s := &Server{ns: ns, log: log, unlock: unlock}
	log.Info("embedded nats-server ready",
		zap.String("url", s.ClientURL()), zap.String("store_dir", o.StoreDir))
	return s, nil
}

// waitReady polls until the server accepts connections, a fatal error is
// logged by the server (it then never becomes ready), or timeout passes.
func waitReady(ns *server.Server, zl *zapLogger, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if ns.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if msg := zl.fatal(); msg != "" {
			return errors.New(msg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", ErrNotReady, timeout)
		}
	}
}

// ClientURL returns the URL clients connect to, with the actual port when
// Options.Port was RandomPort.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// InProcessConn returns a new client connection to the server that does
// not go through a socket: one end of a net.Pipe whose other end the
// server serves as it serves a TCP client (the same authentication, the
// same slow-consumer limits; TLS is offered, not required). It is
// nats.InProcessConnProvider, for nats.InProcessServer. It fails once the
// server is shut down; a nats.Conn given this server then reconnects in
// vain until closed, as it would to a port no one listens on. The
// service's own connection does not use it: measured, it costs the same
// per message as loopback TCP (BenchmarkDelivery; ADR 0004, addendum 2).
func (s *Server) InProcessConn() (net.Conn, error) { return s.ns.InProcessConn() }

// Shutdown stops the server and waits until it has stopped and released its
// store directory. It is safe to call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.unlock()
		s.log.Info("embedded nats-server stopped")
	})
}

// ErrStreamCannotStore is returned by StreamHealth when the server reports
// a write error of the stream: its file store failed a write (too many
// open files, a full disk) and refuses every later one until the server
// restarts.
var ErrStreamCannotStore = errors.New("embedded nats: the stream cannot store")

// StreamHealth asks the server's own health check (as its /healthz does)
// about the named stream of the global account, which every user of this
// server is in: nil when the stream was recovered and has no write error.
// The file store keeps its first write error and fails every later write
// with it, so a stream that failed once stays broken until a restart; this
// is how to tell. It returns ErrStreamCannotStore (with the server's
// reason) for a write error, and another error when the stream is missing
// or JetStream is down.
func (s *Server) StreamHealth(stream string) error {
	h := s.ns.Healthz(&server.HealthzOptions{Account: s.ns.GlobalAccount().Name, Stream: stream})
	if h == nil || h.Error == "" && len(h.Errors) == 0 {
		return nil
	}
	msg := h.Error
	for _, e := range h.Errors {
		msg += "; " + e.Error
	}
	if strings.Contains(msg, "write error") {
		return fmt.Errorf("%w: %s", ErrStreamCannotStore, msg)
	}
	return fmt.Errorf("embedded nats: stream %s: %s", stream, msg)
}
