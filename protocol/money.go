package protocol

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MicroUSDC is an amount of USDC in its smallest unit (USDC has 6 decimals). Money is an
// integer everywhere in gpunex; floats never touch it.
type MicroUSDC int64

// MicroPerUSDC is the number of micro-USDC in one USDC.
const MicroPerUSDC MicroUSDC = 1_000_000

// ErrBadAmount is returned for a USDC amount that cannot be parsed exactly.
var ErrBadAmount = errors.New("bad USDC amount")

// ParseUSDC parses a decimal USDC amount such as "2.10", "0.000001" or "15" exactly. It
// rejects negative numbers, more than 6 decimals, exponents and anything that would overflow.
func ParseUSDC(s string) (MicroUSDC, error) {
	s = strings.TrimSpace(s)
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" && (!hasDot || frac == "") {
		return 0, fmt.Errorf("%w %q: expected a decimal number such as 2.10", ErrBadAmount, s)
	}
	if hasDot && frac == "" {
		return 0, fmt.Errorf("%w %q: digits expected after the decimal point", ErrBadAmount, s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("%w %q: USDC has at most 6 decimals", ErrBadAmount, s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%w %q: only digits and one decimal point are allowed", ErrBadAmount, s)
			}
		}
	}
	var w int64
	if whole != "" {
		var err error
		w, err = strconv.ParseInt(whole, 10, 64)
		if err != nil || w > math.MaxInt64/int64(MicroPerUSDC)-1 {
			return 0, fmt.Errorf("%w %q: too large", ErrBadAmount, s)
		}
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	return MicroUSDC(w*int64(MicroPerUSDC) + f), nil
}

// String formats the amount as a decimal USDC figure with at least two decimals and no
// trailing zeros beyond them: 2100000 -> "2.10", 1 -> "0.000001", -500000 -> "-0.50".
func (m MicroUSDC) String() string {
	sign := ""
	v := uint64(m)
	if m < 0 {
		sign = "-"
		v = uint64(-(m + 1)) + 1
	}
	whole := v / uint64(MicroPerUSDC)
	frac := fmt.Sprintf("%06d", v%uint64(MicroPerUSDC))
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, whole, frac)
}

// USDCDecimals is the number of decimals of USDC: amounts are micro-USDC.
const USDCDecimals = 6
