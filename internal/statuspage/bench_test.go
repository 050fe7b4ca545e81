package statuspage

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// BenchmarkPage1000Tables measures GET / over HTTP with 1,000 tables, each
// fed by one run and with 24 moves of history: the server's whole response
// (render and transfer on loopback). Target: under 100 ms.
func BenchmarkPage1000Tables(b *testing.B) {
	const n = 1000
	now := time.Now().UTC()
	src := &fakeSource{}
	for i := range n {
		table := fmt.Sprintf("bronze.table_%04d", i)
		run := fmt.Sprintf("%08x-abcd-4ef0-8abc-%012x", i, i)
		src.verdicts = append(src.verdicts, control.Verdict{Table: table, FinalizedUntil: now.Add(-2 * time.Hour).Truncate(time.Hour),
			UpdatedAt: now.Add(-time.Hour), RunID: run, BatchID: int64(i)})
		src.runs = append(src.runs, finalizer.TrackerStatus{RunID: run, QueryID: run, Table: table, LastEvent: now, Stale: i%10 == 0})
	}
	p, srv := newPage(b, src, Options{RunsEvery: time.Hour})
	size2body(p) // builds the model (nobody watched yet), then its moves are set
	p.mu.Lock()
	for i := range n {
		table := fmt.Sprintf("bronze.table_%04d", i)
		ms := make([]move, 24)
		for j := range ms {
			at := now.Add(time.Duration(j-24) * 15 * time.Minute)
			ms[j] = move{at: at.Unix(), until: at.Add(-time.Hour).Unix()}
		}
		p.moves[table] = ms
	}
	p.mu.Unlock()
	var size int
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		size = len(body)
	}
	b.StopTimer()
	if !strings.Contains(string(size2body(p)), "bronze.table_0999") {
		b.Fatal("the page lacks the last table")
	}
	b.ReportMetric(float64(size)/1024, "KiB/page")
}

func size2body(p *Page) []byte {
	rec := &recorder{h: http.Header{}}
	p.servePage(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec.b
}

type recorder struct {
	h http.Header
	b []byte
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { r.b = append(r.b, b...); return len(b), nil }
func (r *recorder) WriteHeader(int)             {}
