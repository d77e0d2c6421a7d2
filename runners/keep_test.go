package runners

import (
	"sync"
	"testing"
)

func TestKeep(t *testing.T) {
	made := 0
	mk := func() any { made++; return made }
	var k Keep
	if v := k.Value("a", mk); v != 1 {
		t.Fatalf("first ask made %v, want 1", v)
	}
	if v := k.Value("a", mk); v != 1 || made != 1 {
		t.Fatalf("second ask gave %v after %d makes, want the kept 1 after 1", v, made)
	}
	if v := k.Value("b", mk); v != 2 {
		t.Fatalf("another key gave %v, want a new value 2", v)
	}
	var none *Keep
	if v := none.Value("a", mk); v != 3 {
		t.Fatalf("a nil Keep gave %v, want a new value 3", v)
	}
	if v := none.Value("a", mk); v != 4 {
		t.Fatalf("a nil Keep gave %v again, want a new value 4", v)
	}
	// Asked at once, the value is made once.
	var k2 Keep
	n := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { k2.Value("x", func() any { n++; return n }) })
	}
	wg.Wait()
	if n != 1 {
		t.Fatalf("8 asks at once made the value %d times, want 1", n)
	}
}
