// Package yamlkeys turns yaml.v3's strict-decoding message for an unknown key
// ("field test_ipp not found in type inventory.Host") into one a user can act on:
// the keys valid at that place, and the nearest of them when the key looks like a
// typo of it. The Go type's name means nothing to someone editing a YAML file.
package yamlkeys

import (
	"reflect"
	"regexp"
	"sort"
	"strings"
)

// Types maps the Go types a file decodes into, by the name yaml.v3 prints
// ("inventory.Host"), to their valid keys.
type Types map[string][]string

// Of collects the valid keys of each struct type reachable from the given values
// (their fields, pointers, slices and maps of structs), from their yaml tags.
func Of(values ...any) Types {
	t := Types{}
	for _, v := range values {
		t.add(reflect.TypeOf(v), map[reflect.Type]bool{})
	}
	return t
}

func (t Types) add(rt reflect.Type, seen map[reflect.Type]bool) {
	for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Array || rt.Kind() == reflect.Map {
		rt = rt.Elem()
	}
	if rt.Kind() != reflect.Struct || seen[rt] {
		return
	}
	seen[rt] = true
	var keys []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			// An inlined struct's keys are this one's; an inlined map takes any key.
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				sub := Types{}
				sub.add(ft, map[reflect.Type]bool{})
				keys = append(keys, sub[ft.String()]...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name) // yaml.v3's default
		}
		keys = append(keys, name)
		t.add(f.Type, seen)
	}
	sort.Strings(keys)
	t[rt.String()] = keys
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type (\S+)`)

// Explain rewrites an unknown-field message, leaving any other as it is:
// "unknown key test_ipp (did you mean test_ip?); valid here: ssh, test_ip, user".
func (t Types) Explain(msg string) string {
	return unknownField.ReplaceAllStringFunc(msg, func(m string) string {
		g := unknownField.FindStringSubmatch(m)
		key, keys := g[1], t[g[2]]
		if keys == nil {
			return m
		}
		out := "unknown key " + key
		if near := Nearest(key, keys); near != "" {
			out += " (did you mean " + near + "?)"
		}
		return out + "; valid here: " + strings.Join(keys, ", ")
	})
}

// Nearest is the candidate closest to s by edit distance, if it is close enough to
// be a typo (at most a third of s's length, and at most 3); "" otherwise.
func Nearest(s string, candidates []string) string {
	best, bestD := "", 0
	limit := min(3, max(1, len(s)/3))
	for _, c := range candidates {
		if d := distance(s, c); d <= limit && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance, with a transposition of neighbours one
// edit (a typo's usual shape).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
