package listener

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// refPeekProgress is peekProgress as it was before findKeys: three passes
// of bytes.Count and bytes.Index. The one-pass peek must agree with it on
// every input.
func refPeekProgress(d []byte, runID string) (int64, bool) {
	if bytes.Count(d, keyBatchID) != 1 || bytes.Count(d, keyRunID) != 1 || bytes.Contains(d, escapeU) {
		return 0, false
	}
	at := func(key []byte) (int, bool) {
		i := bytes.Index(d, key)
		if i < 0 {
			return 0, false
		}
		return valueAfter(d, i+len(key))
	}
	v, ok := at(keyBatchID)
	if !ok {
		return 0, false
	}
	batch, ok := peekInt(d[v:])
	if !ok {
		return 0, false
	}
	v, ok = at(keyRunID)
	if !ok || len(d)-v < len(runID)+2 || d[v] != '"' || d[v+1+len(runID)] != '"' {
		return 0, false
	}
	for i := 0; i < len(runID); i++ {
		if d[v+1+i]|0x20 != runID[i]|0x20 {
			return 0, false
		}
	}
	return batch, true
}

// peekSeeds are documents that put the capital I's, the keys and their
// neighbours in every place the one-pass peek looks.
func peekSeeds() [][]byte {
	seeds := [][]byte{
		doc(42, ""), dupBatch(999, 5), escBatch(999, 5),
		[]byte(`{"runId":"` + rawRun + `","batchId":5,"numInputRows":3,"x":"I","batchIdx":1}`),
		[]byte(`I"batchId":1,"runId":"` + rawRun + `"`),
		[]byte(`"batchId"`), []byte(`"runId"`), []byte(`Id"`), []byte(`IIII`),
		[]byte(`{"runId":"` + rawRun + `","batchId":5,"r":"\"runId\""}`),
		[]byte(`{"runIdI":"` + rawRun + `","batchId":5}`),
		[]byte(`{"runId" : "` + rawRun + `" ,"batchId" :7}`),
		[]byte(`{"Event":"x$QueryProgressEvent","progress":{"id":"q","runId":"` + rawRun + `","batchId" : 7 }}`),
	}
	if files, err := filepath.Glob(filepath.Join("..", "progress", "testdata", "twins", "*.json")); err == nil {
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				seeds = append(seeds, b)
			}
		}
	}
	return seeds
}

// TestPeekProgressAgreesWithCount checks the one-pass peek against the
// counting one on the seeds and on every truncation of each.
func TestPeekProgressAgreesWithCount(t *testing.T) {
	for _, s := range peekSeeds() {
		for n := 0; n <= len(s); n++ {
			d := s[:n]
			b1, ok1 := peekProgress(d, rawRun)
			b2, ok2 := refPeekProgress(d, rawRun)
			if b1 != b2 || ok1 != ok2 {
				t.Fatalf("peekProgress(%q) = %d, %v; the counting peek gives %d, %v", d, b1, ok1, b2, ok2)
			}
		}
	}
}

// FuzzPeekProgress checks the one-pass peek against the counting one.
func FuzzPeekProgress(f *testing.F) {
	for _, s := range peekSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		b1, ok1 := peekProgress(d, rawRun)
		b2, ok2 := refPeekProgress(d, rawRun)
		if b1 != b2 || ok1 != ok2 {
			t.Fatalf("peekProgress(%q) = %d, %v; the counting peek gives %d, %v", d, b1, ok1, b2, ok2)
		}
	})
}

// BenchmarkPeekProgress measures the router's peek on a progress of about
// 2 KB, next to the counting peek it replaced.
func BenchmarkPeekProgress(b *testing.B) {
	d := doc(42, "")
	for len(d) < 2000 {
		d = append(d[:len(d)-1], []byte(`,"sink":{"description":"DeltaSink[s3://lake/bronze/x]","numOutputRows":-1}}`)...)
	}
	for _, impl := range []struct {
		name string
		peek func([]byte, string) (int64, bool)
	}{{"one_pass", peekProgress}, {"count", refPeekProgress}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(d)))
			for b.Loop() {
				if _, ok := impl.peek(d, rawRun); !ok {
					b.Fatal("not peeked")
				}
			}
		})
	}
}
