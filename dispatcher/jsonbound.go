package dispatcher

import (
	"errors"
	"fmt"
)

// Bounds of PostgreSQL's numeric, which stores every jsonb number:
// at most 131072 digits before the decimal point (weight 32767 in base-10000
// digits) and at most 16383 after it (NUMERIC_DSCALE_MAX). A number outside
// them fails the INSERT with 22003, aborting the caller's transaction.
const (
	numericMaxIntDigits = 131072
	numericMaxScale     = 16383
	numericMaxExponent  = 1<<30 - 1 // numeric_in refuses |exponent| >= INT_MAX/2
)

// checkJSONNumbers walks the numbers of a valid JSON text (json.Valid has
// vouched for its syntax) and refuses what jsonb would refuse or what would
// make the stored document expand without bound: numeric keeps a number as
// digits and prints it in plain notation, so the 8 bytes of 1e131071 become
// 131,072 characters whenever the row is read as text (every claim reads
// it), and an 81 KB payload of such numbers renders to more than 1 GB, which
// no query can return (54000). limit bounds the length of the text form
// PostgreSQL renders for the whole document (jsonb also adds a space after
// every ':' and ','); strings never render longer than they are written.
func checkJSONNumbers(raw []byte, limit int) error {
	rendered := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(raw) && raw[j] != '"' {
				if raw[j] == '\\' {
					j++
				}
				j++
			}
			rendered += j - i + 1
			i = j
		case c == '-' || (c >= '0' && c <= '9'):
			n, size, err := numberText(raw[i:])
			if err != nil {
				return err
			}
			rendered += size
			i += n - 1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case c == ':' || c == ',':
			rendered += 2
		default:
			rendered++
		}
		if rendered > limit {
			return fmt.Errorf("expands to more than %d bytes as stored (numbers are kept as digits and sent in plain notation: 1e5 is 100000); the limit is MaxPayloadBytes", limit)
		}
	}
	return nil
}

// numberText parses the JSON number at the start of b. It returns how many
// bytes it spans and how long numeric's text form of it is, or an error if
// numeric cannot hold it.
func numberText(b []byte) (n, size int, err error) {
	neg := b[0] == '-'
	if neg {
		n++
	}
	intStart := n
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	intEnd := n
	fracStart, fracEnd := n, n
	if n < len(b) && b[n] == '.' {
		n++
		fracStart = n
		for n < len(b) && b[n] >= '0' && b[n] <= '9' {
			n++
		}
		fracEnd = n
	}
	exp := 0
	if n < len(b) && (b[n] == 'e' || b[n] == 'E') {
		n++
		expNeg := false
		if n < len(b) && (b[n] == '+' || b[n] == '-') {
			expNeg = b[n] == '-'
			n++
		}
		for n < len(b) && b[n] >= '0' && b[n] <= '9' {
			if exp < numericMaxExponent {
				exp = exp*10 + int(b[n]-'0')
			}
			n++
		}
		if exp >= numericMaxExponent {
			return 0, 0, errors.New("contains a number whose exponent is out of range for PostgreSQL numeric")
		}
		if expNeg {
			exp = -exp
		}
	}
	intLen, fracLen := intEnd-intStart, fracEnd-fracStart
	// Leading zeros of the digit string intPart+fracPart.
	lz := 0
	for k := intStart; k < fracEnd; k++ {
		if k == intEnd {
			k = fracStart - 1 // skip the '.'
			continue
		}
		if b[k] != '0' {
			break
		}
		lz++
	}
	allZero := lz == intLen+fracLen
	intDigits := 0
	if !allZero {
		intDigits = max(0, intLen+exp-lz)
	}
	scale := max(0, fracLen-exp)
	switch {
	case intDigits > numericMaxIntDigits:
		return 0, 0, fmt.Errorf("contains a number with %d digits before the decimal point; PostgreSQL numeric (jsonb) holds at most %d", intDigits, numericMaxIntDigits)
	case scale > numericMaxScale:
		return 0, 0, fmt.Errorf("contains a number with %d digits after the decimal point; PostgreSQL numeric (jsonb) holds at most %d", scale, numericMaxScale)
	}
	size = max(1, intDigits)
	if neg {
		size++
	}
	if scale > 0 {
		size += 1 + scale
	}
	return n, size, nil
}
