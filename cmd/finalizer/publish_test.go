package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
)

// startNATS starts an embedded NATS server for a test and returns its URL.
func startNATS(t *testing.T) string {
	t.Helper()
	s, err := embeddednats.Start(embeddednats.Options{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// received collects the subjects published under spark.>.
type received struct {
	mu       sync.Mutex
	subjects []string
}

func subscribe(t *testing.T, url string) *received {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &received{}
	if _, err := nc.Subscribe("spark.>", func(m *nats.Msg) {
		r.mu.Lock()
		r.subjects = append(r.subjects, m.Subject)
		r.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *received) kinds(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.subjects)
		var kinds []string
		for _, s := range r.subjects {
			kinds = append(kinds, strings.Split(s, ".")[1])
		}
		r.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return kinds
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func twinFile(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "progress", "testdata", "twins", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// TestPublishNothingButMalformedFails: a file with no streaming event and
// something that is not one (a YAML file, a progress without batchId)
// exits 2 with a reason; before, it exited 0 ("0 progress, 12 malformed").
func TestPublishNothingButMalformedFails(t *testing.T) {
	url := startNATS(t)
	noBatch := `{"id":"8c57e1ec-94b5-4c99-b100-f694162df0b9","runId":"5b5c1f2e-1a7d-4e4b-9f0c-2d6d3e1c7a10","name":"q","timestamp":"2026-09-28T14:38:05Z","sources":[{"endOffset":{"commit_ts":"2026-09-28T14:05:00"}}]}`
	dir := t.TempDir()
	for name, body := range map[string]string{
		"yaml":     "",
		"no-batch": noBatch + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "..", "examples", "finalizer.yaml")
			if body != "" {
				path = filepath.Join(dir, name)
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rec := subscribe(t, url)
			code, out, errOut := runCLI(t, "publish", "--nats-url", url, path)
			if code != exitUsage || !strings.Contains(errOut, "nothing published") {
				t.Fatalf("exit %d, want 2 naming why\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			if name == "no-batch" && !strings.Contains(errOut, "batchId") {
				t.Errorf("stderr does not say the progress lacks a batchId:\n%s", errOut)
			}
			if got := rec.kinds(t, 0); len(got) != 0 {
				t.Errorf("published %v", got)
			}
		})
	}
	// An event log with only other events (a batch application) is fine.
	other := filepath.Join(dir, "batch-app")
	if err := os.WriteFile(other, []byte(`{"Event":"SparkListenerLogStart","Spark Version":"3.5.0"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "publish", "--nats-url", url, other); code != 0 || !strings.Contains(errOut, "no streaming query event") {
		t.Fatalf("only other events: exit %d, want 0 with a note\n%s%s", code, out, errOut)
	}
	// An empty input is an error: exit 0 let a script believe it published.
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "publish", "--nats-url", url, empty); code != exitUsage || !strings.Contains(errOut, "is empty") {
		t.Fatalf("empty input: exit %d, want 2 saying it is empty\n%s%s", code, out, errOut)
	}
}

// TestPublishPrettyPrinted publishes what a user copies from a notebook or
// a driver log: pretty-printed progress documents and the driver's
// "Streaming query made progress: {...}".
func TestPublishPrettyPrinted(t *testing.T) {
	url := startNATS(t)
	rec := subscribe(t, url)
	body := strings.Join([]string{
		twinFile(t, "started.listener.json"),
		twinFile(t, "cdc_commit_ts.listener.json"),
		"26/09/28 14:38:05 INFO MicroBatchExecution: Streaming query made progress: " + twinFile(t, "kafka_watermark.listener.json"),
		"26/09/28 14:38:06 INFO SparkContext: Invoking stop() from shutdown hook",
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "notebook.txt")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "publish", "--nats-url", url, path)
	if code != 0 || !strings.Contains(out, "published 1 started, 2 progress") || !strings.Contains(out, "1 lines that are not JSON, 0 malformed") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if got := rec.kinds(t, 3); strings.Join(got, ",") != "started,progress,progress" {
		t.Fatalf("published %v", got)
	}
}

// TestPublishFollowWaitsForTheLog: --follow on a log Spark has not created
// yet waits for it and says so, instead of exiting 2.
func TestPublishFollowWaitsForTheLog(t *testing.T) {
	defer func(p, r time.Duration) { followPoll, followRemind = p, r }(followPoll, followRemind)
	followPoll, followRemind = 20*time.Millisecond, 200*time.Millisecond
	url := startNATS(t)
	rec := subscribe(t, url)
	path := filepath.Join(t.TempDir(), "app-1.inprogress")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"publish", "--follow", "--nats-url", url, path}, nil, &out, &errOut)
	}()
	// Both lines, the first at once and a reminder a followRemind later,
	// are waited for: a fixed 500 ms was the command's start and 2.5
	// reminders on a quiet machine, not on a loaded one.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("publish --follow exited %d before the log existed\n%s", code, errOut.String())
		default:
		}
		s := errOut.String()
		if strings.Contains(s, "does not exist yet; waiting") && strings.Contains(s, "still waiting") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stderr does not say it waits after 10 s:\n%s", s)
		}
	}
	if err := os.WriteFile(path, []byte(twinFile(t, "started.eventlog.json")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := rec.kinds(t, 1); len(got) != 1 {
		t.Fatalf("published %v after the log appeared", got)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after interrupt\n%s", code, errOut.String())
	}
}

// syncBuf is a bytes.Buffer safe for one writer and one reader.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
