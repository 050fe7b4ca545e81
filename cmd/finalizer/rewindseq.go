package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/listener"
)

// streamPositionTimeout bounds rewind's read of the event stream's
// position after its commit: connecting (streamDialTimeout of it) and the
// stream's info. A rewind without NATS waits that long before its note.
const (
	streamPositionTimeout = 5 * time.Second
	streamDialTimeout     = 2 * time.Second
)

// addStreamPositionFlags adds the flags rewind reads the event stream's
// position with: the NATS server, its login and the stream's name (the
// --config file's nats and stream sections otherwise).
func addStreamPositionFlags(fs *pflag.FlagSet, skip *bool) {
	fs.String("nats-url", "", "NATS server URL(s) of the service's event stream, comma-separated, read after the rewind commits "+
		"(empty: the --config file's nats.url, else the URL in --data-dir's nats-login.json, written by serve for its embedded server, else "+DefaultNATSURL+")")
	fs.String("stream", "", `the service's event stream (empty: the --config file's stream.name, else "`+listener.DefaultStream+`")`)
	fs.BoolVar(skip, "no-stream-position", false, "do not read the event stream's position after the rewind (a service that did not hear the rewind live then holds a progress stored within a minute after it)")
	addNATSAuthFlags(fs)
}

// recordStreamPosition reads the event stream's last sequence after the
// rewind e committed and records it on the table's row
// (control.Store.RecordRewindPosition): a service that did not hear the
// rewind live (stopped, or its LISTEN connection down) judges a progress
// read from the stream's retained copy by its sequence against it, where
// it used a minute's margin across the NATS and PostgreSQL servers'
// clocks and held a progress stored within that minute after the rewind
// until its run's next one (ADR 0019, addendum of 2026-12-06, "judged by
// sequence"). After the commit, never before: a message stored in
// between is held (late), where one read before the commit would let a
// progress stored before the rewind through (wrong). It never fails the
// rewind: when NATS or the stream cannot be read, or the row cannot be
// written, it says so on stderr and the margin holds.
func recordStreamPosition(ctx context.Context, fs *pflag.FlagSet, c clientConfig, s *control.Store, stdout, stderr io.Writer, table string, e control.AuditEntry) {
	note := func(why error) {
		fmt.Fprintf(stderr, "finalizer: rewind: note: the rewind stands, but the event stream's position could not be recorded with it (%v): a service that is not running now (or whose control database connection is down) will hold a progress of %s that the stream stores within a minute after the rewind until its run's next progress; start the reprocessing query a minute after the rewind, or once NATS is reachable and the running service logged that it read the event stream's state after the rewind (\"the event stream's state when the rewind was heard\")\n",
			why, field(table))
	}
	rctx, cancel := context.WithTimeout(ctx, streamPositionTimeout)
	defer cancel()
	dctx, dcancel := context.WithTimeout(rctx, streamDialTimeout)
	l, err := dialEventStream(dctx, fs, c)
	dcancel()
	if err != nil {
		note(err)
		return
	}
	defer l.Close()
	pos, err := l.StreamPosition(rctx)
	if err != nil {
		note(err)
		return
	}
	if pos.Created.IsZero() {
		note(errors.New("the stream did not say when it was created"))
		return
	}
	ok, err := s.RecordRewindPosition(ctx, table, e.At, control.StreamPosition{Seq: pos.LastSeq, Created: pos.Created})
	switch {
	case err != nil:
		note(err)
	case !ok:
		note(errors.New("the table was rewound again since"))
	default:
		// The stream and the server it was read from, named: a position
		// read from another server's stream (a wrong --nats-url) is not
		// used by the service, which warns (review nit 2).
		fmt.Fprintf(stdout, "recorded the event stream's position with the rewind (sequence %d of stream %s on %s): a service that did not hear the rewind judges the stream's progress by it when its stream is this one\n",
			pos.LastSeq, field(l.StreamName()), field(l.ServerURL()))
	}
}

// dialEventStream connects to the NATS server of the service's event
// stream for rewind: --nats-url, else the --config file's nats.url (with
// its login), else the data dir's embedded server (natsTarget), with the
// NATS flags over the file's login; the stream is --stream, else the
// file's stream.name, else listener.DefaultStream.
func dialEventStream(ctx context.Context, fs *pflag.FlagSet, c clientConfig) (*listener.Listener, error) {
	// The data dir's login (natsTarget) is looked up by its flag, as
	// dialNATS does.
	cfg := defaultConfig()
	if c.configFile != "" {
		if err := loadConfigFile(c.configFile, &cfg); err != nil {
			return nil, err
		}
	}
	nc := cfg.NATS
	applyNATSAuthFlags(fs, &nc)
	stream, _ := fs.GetString("stream")
	if stream == "" {
		stream = cfg.Stream.Name
	}
	var (
		url    string
		dialer nats.CustomDialer
	)
	if f := fs.Lookup("nats-url"); (f == nil || !f.Changed) && nc.URL != "" {
		url = nc.URL
	} else {
		u, login, ok := natsTarget(fs, nc)
		url = u
		if ok {
			nc.User, nc.Password = login.User, login.Password
			d, err := loginDialer(fs) // as dialNATS
			if err != nil {
				return nil, err
			}
			dialer = d
		}
	}
	l, err := listener.Dial(ctx, listener.Options{
		URL: url, Stream: stream, Name: "finalizer-cli", RequestTimeout: streamPositionTimeout,
		User: nc.User, Password: nc.Password, Token: nc.Token, NKeySeedFile: nc.NKeySeed, CredsFile: nc.Creds,
		TLSCAFile: nc.TLSCA, TLSCertFile: nc.TLSCert, TLSKeyFile: nc.TLSKey, Dialer: dialer,
	})
	if err != nil {
		return nil, fmt.Errorf("NATS: %w", err) // the error names the (redacted) URL
	}
	return l, nil
}
