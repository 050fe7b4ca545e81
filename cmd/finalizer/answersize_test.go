package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestALargeRunsAnswerIsRefusedUnread: the commands that ask the service
// for its runs (status, is-final, wait, rewind's live-runs check) read its
// whole answer with no size bound, and decoded it after the deadline (a
// json.Decoder buffers the whole value first): 75 MB took 36.7 s and
// 4.8 GB. A page larger than maxAnswer is refused ("answer too large"),
// and rewind says it could not check.
func TestALargeRunsAnswerIsRefusedUnread(t *testing.T) {
	run := `{"table":"bronze.orders","run_id":"0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0","query_id":"q"},`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"runs":[`)
		for n := 0; n <= maxAnswer; n += len(run) {
			if _, err := fmt.Fprint(w, run); err != nil {
				return
			}
		}
		fmt.Fprint(w, `{"table":"x"}]}`)
	}))
	defer srv.Close()
	began := time.Now()
	_, _, err := fetchRuns(context.Background(), srv.URL, "")
	if err == nil || !strings.Contains(err.Error(), "answer too large") {
		t.Fatalf("fetchRuns of a %d MB answer: %v; want answer too large", maxAnswer>>20, err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("fetchRuns took %s", d)
	}
}

// TestATricklingRunsAnswerEndsWithTheDeadline: a service that sends its
// headers, then its body a byte at a time, is given up at fetchRuns'
// deadline, body read included.
func TestATricklingRunsAnswerEndsWithTheDeadline(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"runs":[`)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				fmt.Fprint(w, " ")
				w.(http.Flusher).Flush()
			}
		}
	}))
	defer srv.Close()
	defer close(stop)
	began := time.Now()
	if _, _, err := fetchRuns(context.Background(), srv.URL, ""); err == nil {
		t.Fatal("fetchRuns of a body that never ends: no error")
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("fetchRuns took %s; want its 3 s deadline", d)
	}
}
