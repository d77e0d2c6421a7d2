// Package tcrate reads rates in tc's words: what a user writes for htb, tbf, cake
// or netem ("100mbit", "1.5gbit", "12500kbps") and what tc prints back ("30Mbit").
package tcrate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// units are tc's rate suffixes (tc_util.c's get_rate64), in bits per second per
// unit: "bit" words count bits, "bps" words bytes. Both IEC (kibit) and SI
// prefixes are tc's.
var units = map[string]float64{
	"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
	"kibit": 1 << 10, "mibit": 1 << 20, "gibit": 1 << 30, "tibit": 1 << 40,
	"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
	"kibps": 8 << 10, "mibps": 8 << 20, "gibps": 8 << 30, "tibps": 8 << 40,
}

// Parse is a rate in bits per second. A number without a unit is refused: tc
// reads it as bytes per second, which nobody who writes "100" means.
func Parse(s string) (float64, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q is not a rate: write it as tc does, such as 100mbit or 1gbit", s)
	}
	scale, ok := units[strings.ToLower(s[i:])]
	v, err := strconv.ParseFloat(s[:i], 64)
	if !ok || err != nil || math.IsInf(v, 0) || v <= 0 {
		return 0, fmt.Errorf("%q is not a rate: write it as tc does, such as 100mbit or 1gbit", s)
	}
	return v * scale, nil
}
