package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
)

// TestJoinPrintsWhyADoneRunsLastProgressWasNotApplied: a run done with a
// last progress posted before its table's rewind, not applied, printed a
// bare "done", which the README defines as "its last progress was applied".
// join prints the service's note with it (still exit 0); a plain done
// stays "done".
func TestJoinPrintsWhyADoneRunsLastProgressWasNotApplied(t *testing.T) {
	url := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := listener.Dial(ctx, listener.Options{URL: url, Name: "test-service"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	const rewound, plain = "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0", "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b1"
	note := "its last progress was posted before the rewind of table bronze.orders and not applied"
	sub, err := svc.ServeAPI(
		func(context.Context, listener.TrackRequest) listener.TrackReply { return listener.TrackReply{} },
		func(_ context.Context, r listener.JoinRequest) listener.JoinReply {
			if r.RunID == rewound {
				return listener.JoinReply{Done: true, Note: note}
			}
			return listener.JoinReply{Done: true}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	for _, tc := range []struct{ run, want string }{
		{rewound, "run " + rewound + ": done (" + note + ")\n"},
		{plain, "run " + plain + ": done\n"},
	} {
		code, out, errOut := runCLI(t, "join", "--nats-url", url, "--data-dir", t.TempDir(), "--run-id", tc.run, "--timeout", "5s")
		if code != exitOK || out != tc.want {
			t.Errorf("join %s: exit %d, stdout %q (stderr %q); want 0, %q", tc.run, code, out, errOut, tc.want)
		}
		if strings.Contains(errOut, "warning") {
			t.Errorf("join %s: stderr %q", tc.run, errOut)
		}
	}
}
