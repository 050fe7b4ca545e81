package main

import (
	"fmt"
	"maps"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// unknownKey finds the first key of the YAML document raw that Config
// does not have, and describes it the way a user wrote it: the key, where
// it is (`tables[0]`, `nats.embedded`), its line, and the closest known key
// when one is near. It returns nil when every key is known (or raw does
// not parse: the decoder's own error says why).
func unknownKey(raw []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	return checkKeys(doc.Content[0], reflect.TypeFor[Config](), "")
}

// checkKeys walks n against the struct (or slice of structs) type t.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, item := range n.Content {
			if err := checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				where := "at the top level"
				if path != "" {
					where = "in " + path
				}
				msg := fmt.Sprintf("line %d: unknown key %q %s", k.Line, k.Value, where)
				if s := closest(k.Value, fields); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				return fmt.Errorf("%s", msg)
			}
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			if err := checkKeys(v, ft, sub); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlFields maps the YAML keys of struct t to their field types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if opts == "inline" {
			// An inlined struct's keys are the outer one's
			// (tables[].time is progress.SpecOptions.Time).
			maps.Copy(out, yamlFields(f.Type))
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// closest returns the known key nearest to key by edit distance, when it is
// near enough to be a typo (at most a third of the key's length, and 3).
func closest(key string, known map[string]reflect.Type) string {
	best, bestD := "", min(3, max(1, len(key)/3))+1
	for k := range known {
		if d := editDistance(strings.ToLower(key), k); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (keys are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
