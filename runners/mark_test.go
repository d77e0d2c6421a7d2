package runners

import "testing"

func TestParseTOS(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // -1: an error
	}{
		{"CS0", 0x00}, {"CS1", 0x20}, {"CS5", 0xa0}, {"CS7", 0xe0}, {"cs1", 0x20},
		{"EF", 0xb8}, {"ef", 0xb8}, {" EF ", 0xb8}, {"LE", 0x04}, {"VA", 0xb0},
		{"AF11", 0x28}, {"AF12", 0x30}, {"AF13", 0x38}, {"AF21", 0x48}, {"AF41", 0x88}, {"AF43", 0x98},
		{"0xb8", 0xb8}, {"0XB8", 0xb8}, {"184", 184}, {"0", 0}, {"255", 255}, {"010", 10},
		{"", -1}, {"256", -1}, {"-1", -1}, {"0x100", -1}, {"CS8", -1}, {"AF14", -1}, {"AF51", -1},
		{"EF1", -1}, {"0x", -1}, {"1.5", -1},
	} {
		got, err := ParseTOS(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("ParseTOS(%q) = %#x, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTOS(%q) = %#x, %v; want %#x", tc.in, got, err, tc.want)
		}
	}
}
