package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/redact"
)

// reserveListeners checks every address the service will listen on before
// any slow part starts (the managed PostgreSQL takes seconds): a taken port
// fails the start at once, and the data dir lock's stop removes what a
// first start created. It runs after the lock, so that a second serve on
// the same data dir (its ports taken by the first) is named as such. The HTTP API's address is
// bound here and held until serveHTTP serves it, so nothing can take it
// meanwhile (a connection made during the start waits in the kernel's
// backlog and is answered once the service is ready); the embedded NATS
// server binds its own port, so its address is only tried here (bound and
// closed) and embeddednats.Start tries it again.
func (s *Service) reserveListeners(context.Context) error {
	natsAddr, err := s.checkNATSListen()
	if err != nil {
		return err
	}
	if s.opts.HTTPListen == "" || s.opts.HTTPListen == "off" {
		return nil
	}
	if natsAddr != "" && sameListenAddr(natsAddr, s.opts.HTTPListen) {
		return fmt.Errorf("http listen %s: the embedded NATS server listens there too (--nats-listen, nats.listen); give --http-listen (http.listen) another port", s.opts.HTTPListen)
	}
	ln, err := net.Listen("tcp", s.opts.HTTPListen)
	if err != nil {
		return listenError("http listen "+s.opts.HTTPListen, s.opts.HTTPListen, "--http-listen (http.listen, \"off\" disables the API)", err)
	}
	s.httpLn = ln
	s.started("http listener", func(context.Context) {
		if s.httpLn != nil { // not handed to the HTTP server: the start failed
			_ = s.httpLn.Close()
		}
	})
	return nil
}

// checkNATSListen tries the embedded NATS server's address and returns it
// ("" without an embedded server, or with a port the system picks).
func (s *Service) checkNATSListen() (string, error) {
	o := s.opts.EmbeddedNATS
	if o == nil || o.Port == embeddednats.RandomPort {
		return "", nil
	}
	host, port := o.Host, o.Port
	if host == "" {
		host = embeddednats.DefaultHost
	}
	if port == 0 {
		port = embeddednats.DefaultPort
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", listenError("embedded nats: cannot listen on "+addr, addr, "--nats-listen (nats.listen)", err)
	}
	_ = ln.Close()
	return addr, nil
}

// listenError says that addr cannot be listened on, which flag sets it and,
// when the port is taken, how to find what holds it.
func listenError(what, addr, flag string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: %w; set another address with %s", what, err, flag)
	}
	port := addr
	if _, p, perr := net.SplitHostPort(addr); perr == nil {
		port = p
	}
	return fmt.Errorf("%s: %w: another process listens there (find it with `ss -ltnp 'sport = :%s'` or `lsof -nP -iTCP:%s -sTCP:LISTEN`); stop it, or set another address with %s",
		what, err, port, port, flag)
}

// sameListenAddr reports whether two host:port addresses would collide: the
// same port on the same host, or on a wildcard host.
func sameListenAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// checkPreconditions checks, before anything starts, what the service
// would otherwise find wrong only after slower work (the managed
// PostgreSQL's start): the NATS client's credential and TLS files, read as
// the dial reads them, and the PostgreSQL URL, parsed as the store parses
// it.
func (s *Service) checkPreconditions() error {
	if err := s.opts.NATS.CheckFiles(); err != nil {
		return err
	}
	if s.opts.PostgresURL != "" {
		if _, err := pgxpool.ParseConfig(s.opts.PostgresURL); err != nil {
			return fmt.Errorf("postgres.url (--postgres-url): %w", redact.Error(err, s.opts.PostgresURL))
		}
	}
	return nil
}
