package qdisc

import (
	"strings"

	"github.com/bloatbench/bloatbench/internal/tcrate"
)

// ShaperRate is the rate a setup holds a bottleneck's egress to, in bits per
// second, and what holds it ("htb rate", "tbf rate", "cake bandwidth"): the
// rate its queue should drain at while it has one. ifb asks for the IFB device
// of the setup's ingress shaping instead. 0 and "" when the setup shapes
// nothing there (mq's children each shape one tx queue, not the device).
func (s *Setup) ShaperRate(ifb bool) (float64, string) {
	if s == nil {
		return 0, ""
	}
	root, rate := s.Root, s.Rate
	if ifb {
		if s.Ingress == nil {
			return 0, ""
		}
		root, rate = s.Ingress.Root, s.Ingress.Rate
	}
	if rate != "" {
		if v, err := tcrate.Parse(rate); err == nil {
			return v, "htb rate"
		}
	}
	if root == nil {
		return 0, ""
	}
	param := map[string]string{"tbf": "rate", "cake": "bandwidth"}[root.Kind]
	if param == "" {
		return 0, ""
	}
	if v, err := tcrate.Parse(root.Params[param]); err == nil {
		return v, root.Kind + " " + param
	}
	return 0, ""
}

// FoundShaperRate is the rate a device's root qdisc, as found, holds its egress
// to: tbf's rate, cake's bandwidth, or the ceilings of htb's top classes (what
// they may send at together). qdiscs and classes are `tc qdisc show` and `tc
// class show` of the device, a line each, joined with ";" (the host's facts). 0
// and "" when its root shapes nothing or tc's words are not these.
func FoundShaperRate(qdiscs, classes string) (float64, string) {
	for _, line := range strings.Split(qdiscs, ";") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "qdisc" || f[3] != "root" {
			continue
		}
		switch f[1] {
		case "tbf", "cake":
			word := map[string]string{"tbf": "rate", "cake": "bandwidth"}[f[1]]
			if v, ok := wordAfter(f, word); ok {
				return v, f[1] + " " + word + " (as found)"
			}
		case "htb":
			var sum float64
			for _, cl := range strings.Split(classes, ";") {
				g := strings.Fields(cl)
				if len(g) < 4 || g[0] != "class" || g[1] != "htb" || g[3] != "root" {
					continue
				}
				v, ok := wordAfter(g, "ceil")
				if !ok {
					v, ok = wordAfter(g, "rate")
				}
				if ok {
					sum += v
				}
			}
			if sum > 0 {
				return sum, "htb ceil (as found)"
			}
		}
		return 0, ""
	}
	return 0, ""
}

// wordAfter is the rate tc printed after word.
func wordAfter(f []string, word string) (float64, bool) {
	for i := 0; i+1 < len(f); i++ {
		if f[i] == word {
			v, err := tcrate.Parse(f[i+1])
			return v, err == nil
		}
	}
	return 0, false
}
