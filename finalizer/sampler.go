package finalizer

import "time"

// Defaults of the log sampler.
const (
	// sampleEvery and sampleBurst: of each kind of line that every run
	// logs in the normal course, at most sampleBurst go out at their level
	// per sampleEvery; the others go to DEBUG. A service of a few runs
	// logs each of them; one of 100,000 logs about one per second per kind.
	// The sampler is a lograte.Limiter (NewBurst), shared by a registry
	// and its trackers: the count held back rides on the next line of
	// the kind, or the janitor says it (reportHeld).
	sampleEvery = 10 * time.Second
	sampleBurst = 10
)
