package finalizer

// memo is a bounded map that forgets its oldest keys first.
type memo struct {
	max   int
	m     map[string]JoinResult
	order []string
}

func newMemo(max int) *memo { return &memo{max: max, m: make(map[string]JoinResult)} }

func (m *memo) get(k string) (JoinResult, bool) { v, ok := m.m[k]; return v, ok }

func (m *memo) del(k string) { delete(m.m, k) }

func (m *memo) put(k string, v JoinResult) {
	if _, ok := m.m[k]; !ok {
		m.order = append(m.order, k)
	}
	m.m[k] = v
	for len(m.m) > m.max && len(m.order) > 0 {
		old := m.order[0]
		m.order = m.order[1:]
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
