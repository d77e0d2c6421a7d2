package runners

import (
	"fmt"
	"strings"
)

// The ECN field, the TOS byte's two low bits (RFC 3168): what a UDP flood or
// probe marks its datagrams with, so that an L4S queue (dualpi2's L queue takes
// ECT(1), RFC 9331) or a marking AQM sees the traffic as ECN-capable. TCP sets
// its own from the connection's ECN state; UDP sends what the socket's TOS says.
const (
	ECNNotECT = 0
	ECNECT1   = 1
	ECNECT0   = 2
	ECNCE     = 3
	ecnMask   = 3
)

// ECNName is a codepoint as RFC 3168 writes it.
func ECNName(cp int) string {
	return [...]string{"Not-ECT", "ECT(1)", "ECT(0)", "CE"}[cp&ecnMask]
}

// ParseECN reads a codepoint: notect, ect0, ect1 or ce (any case; "not-ect",
// "ect(0)" and "ect(1)" as RFC 3168 writes them too).
func ParseECN(s string) (int, error) {
	w := strings.NewReplacer("-", "", "(", "", ")", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(s)))
	switch w {
	case "notect":
		return ECNNotECT, nil
	case "ect1":
		return ECNECT1, nil
	case "ect0":
		return ECNECT0, nil
	case "ce":
		return ECNCE, nil
	}
	return 0, fmt.Errorf("ecn %q: want notect, ect0, ect1 or ce", s)
}

// marking is the TOS byte of a job's tos: and ecn: parameters, -1 for neither
// (the socket left unmarked), and how the data file's series name it ("EF",
// "EF, ECT(1)"). ecn sets the byte's ECN field; a tos that sets the field to
// another codepoint is a contradiction, refused.
func marking(tos, ecn string) (int, string, error) {
	if tos == "" && ecn == "" {
		return -1, "", nil
	}
	v, label := 0, tos
	if tos != "" {
		t, err := ParseTOS(tos)
		if err != nil {
			return 0, "", fmt.Errorf("tos: %w", err)
		}
		v = t
	}
	if ecn != "" {
		cp, err := ParseECN(ecn)
		if err != nil {
			return 0, "", err
		}
		if set := v & ecnMask; set != 0 && set != cp {
			return 0, "", fmt.Errorf("tos %s sets the ECN field to %s, and ecn says %s: give the DSCP in tos and the codepoint in ecn", tos, ECNName(set), ECNName(cp))
		}
		v = v&^ecnMask | cp
		if label != "" {
			label += ", "
		}
		label += ECNName(cp)
	}
	return v, label, nil
}
