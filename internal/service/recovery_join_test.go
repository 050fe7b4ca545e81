package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/listener"
)

// A join that reaches a restarting service before it has recovered its
// tracks waits for the recovery instead of saying "run is not tracked"
// (exit 2, which a script re-joining after the exit 3 of a rolling
// restart takes for a fatal error). The API answers from before recovery
// starts; recovery is held here by a lock on the tracks table.
func TestJoinDuringRecoveryWaitsForIt(t *testing.T) {
	pgURL := pgtest.URL(t)
	first, err := Start(context.Background(), Options{DataDir: t.TempDir(), PostgresURL: pgURL,
		EmbeddedNATS: &embeddednats.Options{Host: "127.0.0.1", Port: embeddednats.RandomPort}})
	if err != nil {
		t.Fatal(err)
	}
	track(t, first, newRun)
	first.Stop(context.Background())

	unlock := lockTracksTable(t, pgURL)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	started := make(chan *Service, 1)
	go func() {
		svc, err := Start(context.Background(), Options{DataDir: t.TempDir(), PostgresURL: pgURL,
			EmbeddedNATS: &embeddednats.Options{Host: "127.0.0.1", Port: port}})
		if err != nil {
			t.Error(err)
		}
		started <- svc
	}()
	var nc *nats.Conn
	eventually(t, "the restarting service's NATS", func() bool {
		nc, err = nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port))
		return err == nil
	})
	defer nc.Close()
	req, err := json.Marshal(listener.JoinRequest{RunID: newRun, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	replies := make(chan listener.JoinReply, 1)
	go func() {
		var rep listener.JoinReply
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			m, err := nc.Request("finalizer.api.join", req, 10*time.Second)
			if err != nil {
				continue // no responders yet: the API is not served yet
			}
			if err := json.Unmarshal(m.Data, &rep); err != nil {
				t.Error(err)
			}
			break
		}
		replies <- rep
	}()
	select {
	case rep := <-replies:
		unlock()
		if svc := <-started; svc != nil {
			svc.Stop(context.Background())
		}
		t.Fatalf("join during recovery = %+v, want it to wait for the recovery", rep)
	case <-time.After(500 * time.Millisecond):
	}
	unlock() // recovery goes on
	svc := <-started
	if svc == nil {
		t.FailNow()
	}
	defer svc.Stop(context.Background())
	rep := <-replies
	if rep.Error != "" || rep.Done || rep.Stopped != "" {
		t.Fatalf("join after recovery = %+v, want the live run not done within its timeout", rep)
	}
}
