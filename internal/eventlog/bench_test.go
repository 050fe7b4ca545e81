package eventlog_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/internal/eventlog"
)

// BenchmarkPublishPath reads an event log shaped like a busy streaming
// application's (nine task-end lines of about 1.5 KiB for every streaming
// progress line) and keeps the streaming events, as `finalizer publish`
// does. Bytes/s is the log's uncompressed size.
func BenchmarkPublishPath(b *testing.B) {
	data, err := os.ReadFile(sparkLog)
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	progressLine := lines[5]
	task := []byte(`{"Event":"SparkListenerTaskEnd","Stage ID":3,"Stage Attempt ID":0,"Task Type":"ResultTask","Task End Reason":{"Reason":"Success"},"Task Info":{"Task ID":42,"Index":0,"Attempt":0,"Launch Time":1596020223000,"Executor ID":"driver","Host":"localhost","Locality":"PROCESS_LOCAL","Speculative":false,"Getting Result Time":0,"Finish Time":1596020223100,"Failed":false,"Killed":false,"Accumulables":[` +
		strings.Repeat(`{"ID":1,"Name":"internal.metrics.executorRunTime","Update":12,"Value":345,"Internal":true,"Count Failed Values":true},`, 11) +
		`{"ID":2}]}}`)
	var log bytes.Buffer
	for log.Len() < 32<<20 {
		for range 9 {
			log.Write(task)
			log.WriteByte('\n')
		}
		log.Write(progressLine)
		log.WriteByte('\n')
	}
	plain := log.Bytes()
	dir := b.TempDir()
	cases := []struct {
		name, file string
		content    []byte
	}{
		{"plain", appID, plain},
		{"zstd", appID + ".zstd", zstdBytes(b, plain)},
	}
	for _, c := range cases {
		path := filepath.Join(dir, c.file)
		if err := os.WriteFile(path, c.content, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				r, err := eventlog.Open(path, eventlog.Options{})
				if err != nil {
					b.Fatal(err)
				}
				kept := 0
				for {
					l, err := r.Next(context.Background())
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if _, ok, err := eventlog.Streaming(l.Data); err != nil {
						b.Fatal(err)
					} else if ok {
						kept++
					}
				}
				_ = r.Close()
				if kept == 0 {
					b.Fatal("no streaming events kept")
				}
			}
		})
	}
}
