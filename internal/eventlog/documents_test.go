package eventlog

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/progress"
)

// documents runs text through Documents and Streaming, returning the
// events and the errors in order.
func documents(t *testing.T, text string) ([]*progress.Event, []error) {
	t.Helper()
	var d Documents
	var evs []*progress.Event
	var errs []error
	take := func(doc Line) {
		if !bytes.HasPrefix(bytes.TrimSpace(doc.Data), []byte("{")) {
			return // a log line that is not JSON: publish counts it apart
		}
		ev, ok, err := Streaming(doc.Data)
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			evs = append(evs, ev)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		doc, ok, err := d.Add(Line{Data: bytes.Clone(sc.Bytes()), Source: "in", Number: n})
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			take(doc)
		}
	}
	if err := d.Flush(); err != nil {
		errs = append(errs, err)
	}
	return evs, errs
}

func twin(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "progress", "testdata", "twins", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// TestDocumentsPrettyPrinted reads the forms a user pastes or points
// publish at: pretty-printed progress documents (println(query.lastProgress),
// prettyJson), the driver log's "Streaming query made progress: {...}",
// interleaved with one-line event-log lines and other log lines.
func TestDocumentsPrettyPrinted(t *testing.T) {
	pretty := twin(t, "cdc_commit_ts.listener.json")
	if !strings.Contains(pretty, "\n") {
		t.Fatal("the twin is not pretty-printed")
	}
	text := strings.Join([]string{
		twin(t, "started.eventlog.json"),
		pretty,
		"26/09/28 14:38:05 INFO MicroBatchExecution: Streaming query made progress: " + twin(t, "kafka_watermark.listener.json"),
		"26/09/28 14:38:06 INFO SparkContext: something else entirely",
		twin(t, "first_batch.eventlog.json"),
		twin(t, "terminated_clean.listener.json"),
	}, "\n")
	evs, errs := documents(t, text)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	want := []progress.Kind{progress.KindStarted, progress.KindProgress, progress.KindProgress, progress.KindProgress, progress.KindTerminated}
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d", len(evs), len(want))
	}
	for i, ev := range evs {
		if ev.Kind != want[i] {
			t.Errorf("event %d: kind %v, want %v", i, ev.Kind, want[i])
		}
	}
	if evs[1].BatchID != 17 {
		t.Errorf("pretty progress: batch %d, want 17", evs[1].BatchID)
	}
}

// TestDocumentsCutShort: a document that never closes is reported, and the
// lines after it are not swallowed.
func TestDocumentsCutShort(t *testing.T) {
	pretty := twin(t, "cdc_commit_ts.listener.json")
	cut := pretty[:len(pretty)/2]
	evs, errs := documents(t, cut+"\n"+twin(t, "first_batch.eventlog.json")+"\n"+cut)
	if len(evs) != 1 || evs[0].Kind != progress.KindProgress {
		t.Fatalf("events %v, want the one complete progress", evs)
	}
	if len(errs) != 2 || !errors.Is(errs[0], ErrUnfinishedDocument) || !errors.Is(errs[1], ErrUnfinishedDocument) {
		t.Fatalf("errors %v, want two unfinished documents", errs)
	}
	if !strings.Contains(errs[0].Error(), "in:1:") {
		t.Errorf("error %q does not say where the document began", errs[0])
	}
}

// TestDocumentsBounded: a document that grows past MaxBytes is dropped.
func TestDocumentsBounded(t *testing.T) {
	d := Documents{MaxBytes: 64}
	if _, ok, err := d.Add(Line{Data: []byte("{"), Source: "in", Number: 1}); ok || err != nil {
		t.Fatalf("open: %v %v", ok, err)
	}
	_, _, err := d.Add(Line{Data: bytes.Repeat([]byte("x"), 100), Source: "in", Number: 2})
	if !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err %v, want ErrLineTooLong", err)
	}
	if err := d.Flush(); err != nil {
		t.Fatalf("flush after a drop: %v", err)
	}
}
