package runners

import "sync"

// Keep is what an agent keeps from one job to the next for as long as its
// controller's session lasts (the runs of one `run` or batch): things that cost a
// host seconds to make and are the same for every run, made once. The zero value
// is empty and ready; a nil Keep keeps nothing, and makes each time.
type Keep struct {
	mu     sync.Mutex
	values map[string]any
}

// Value is what is kept under key, made by make on the first ask. make runs under
// the Keep's lock: it must be quick (what is slow is what the value, once made,
// saves), and must not ask the Keep again.
func (k *Keep) Value(key string, make func() any) any {
	if k == nil {
		return make()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.values[key]; ok {
		return v
	}
	if k.values == nil {
		k.values = map[string]any{}
	}
	v := make()
	k.values[key] = v
	return v
}
