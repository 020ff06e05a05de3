package protocol

import (
	"errors"
	"math"
	"testing"
)

func TestParseUSDC(t *testing.T) {
	good := map[string]MicroUSDC{
		"2.10":      2_100_000,
		"2.1":       2_100_000,
		"0.000001":  1,
		".5":        500_000,
		"15":        15_000_000,
		" 3.000000": 3_000_000,
		"0":         0,
	}
	for in, want := range good {
		got, err := ParseUSDC(in)
		if err != nil || got != want {
			t.Errorf("ParseUSDC(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "1.", "-1", "1.0000001", "1e3", "1,5", "abc", "9223372036854.775808", "99999999999999999999"} {
		if _, err := ParseUSDC(in); !errors.Is(err, ErrBadAmount) {
			t.Errorf("ParseUSDC(%q) err = %v; want ErrBadAmount", in, err)
		}
	}
}

func TestMicroUSDCString(t *testing.T) {
	cases := map[MicroUSDC]string{
		2_100_000:     "2.10",
		1:             "0.000001",
		15_000_000:    "15.00",
		123_456_789:   "123.456789",
		-500_000:      "-0.50",
		0:             "0.00",
		math.MinInt64: "-9223372036854.775808",
	}
	for in, want := range cases {
		if got := in.String(); got != want {
			t.Errorf("%d.String() = %q; want %q", int64(in), got, want)
		}
	}
	// Round trip for non-negative values.
	for _, v := range []MicroUSDC{0, 1, 10, 999_999, 1_000_000, 2_100_000, 987_654_321_012} {
		back, err := ParseUSDC(v.String())
		if err != nil || back != v {
			t.Errorf("round trip %d -> %q -> %d, %v", int64(v), v.String(), back, err)
		}
	}
}
