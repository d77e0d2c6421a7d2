package htmlreport

import (
	"math"
	"strings"
	"testing"
)

func TestWriteHistoryKeepsNamesText(t *testing.T) {
	nan := math.NaN()
	hs := []History{{Test: "tcp_4down", Setup: `</script><script>alert(1)</script>`, Batches: []string{"a", "b", "c"},
		Trends: []Trend{
			{Metric: "Ping loaded median", Units: "ms", Medians: []float64{10, nan, 15}, Lo: []float64{9, nan, 14}, Hi: []float64{11, nan, 16}, BaseLo: 9, BaseHi: 11},
			{Metric: "TCP download sum", Units: "Mbit/s", Medians: []float64{95, 94, 95}, Lo: []float64{95, 94, 95}, Hi: []float64{95, 94, 95}, BaseLo: nan, BaseHi: nan},
		}}}
	var b strings.Builder
	if err := WriteHistory(&b, "history", hs); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "<script>alert(1)") {
		t.Error("a setup's name reached the page as markup")
	}
	for _, want := range []string{`"Ping loaded median (ms) baseline low"`, `"-"`, `"Mbit/s"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(page, `"TCP download sum (Mbit/s) baseline low"`) {
		t.Error("a band drawn without a baseline")
	}
	if err := WriteHistory(&b, "history", nil); err == nil {
		t.Error("a history of nothing")
	}
}

func TestSpread(t *testing.T) {
	if m, lo, hi := Spread([]float64{3, 1, 2, 10}); m != 2.5 || lo != 1 || hi != 10 {
		t.Errorf("spread %v %v %v", m, lo, hi)
	}
	if m, _, _ := Spread(nil); !math.IsNaN(m) {
		t.Errorf("spread of nothing %v", m)
	}
}
