package progress

import (
	"path/filepath"
	"testing"
)

// BenchmarkParse measures Parse on a Kafka progress with 12 partitions in
// both forms (about 2.8 KB pretty-printed listener form, 1.9 KB event-log
// line), next to the encoding/json reference implementation.
func BenchmarkParse(b *testing.B) {
	for _, form := range []string{"listener", "eventlog"} {
		data := readFile(b, filepath.Join("testdata", "twins", "kafka_12_partitions."+form+".json"))
		for _, impl := range []struct {
			name  string
			parse func([]byte, Kind) (*Event, error)
		}{{"scanner", Parse}, {"encoding_json", refParse}} {
			b.Run(form+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.parse(data, KindProgress); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCandidate measures the default spec (offset:/commit_ts, hour)
// and a day in Europe/London on a CDC progress.
func BenchmarkCandidate(b *testing.B) {
	ev, err := Parse(readFile(b, filepath.Join("testdata", "twins", "cdc_commit_ts.eventlog.json")), KindProgress)
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range []SpecOptions{{}, {Granularity: "day", Timezone: "Europe/London"}} {
		spec := mustSpec(b, o)
		b.Run(spec.Granularity.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := spec.Candidate(ev); !ok {
					b.Fatal("no candidate")
				}
			}
		})
	}
}
