package finalizer

// memo is a bounded map that forgets its oldest keys first.
type memo[V any] struct {
	max   int
	m     map[string]V
	order []string
	// evicted, when set, is told of each key forgotten for room.
	evicted func(k string, v V)
}

func newMemo[V any](max int) *memo[V] { return &memo[V]{max: max, m: make(map[string]V)} }

func (m *memo[V]) get(k string) (V, bool) { v, ok := m.m[k]; return v, ok }

func (m *memo[V]) del(k string) { delete(m.m, k) }

func (m *memo[V]) put(k string, v V) {
	if _, ok := m.m[k]; !ok {
		m.order = append(m.order, k)
	}
	m.m[k] = v
	for len(m.m) > m.max && len(m.order) > 0 {
		old := m.order[0]
		m.order = m.order[1:]
		if v, ok := m.m[old]; ok && m.evicted != nil {
			m.evicted(old, v)
		}
		delete(m.m, old)
	}
	if len(m.order) > 2*m.max+16 { // deleted keys linger in order: compact
		kept := make([]string, 0, len(m.m))
		for _, k := range m.order {
			if _, ok := m.m[k]; ok {
				kept = append(kept, k)
			}
		}
		m.order = kept
	}
}
