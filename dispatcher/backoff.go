package dispatcher

import (
	"math/rand/v2"
	"time"
)

// FullJitter is the AWS Architecture Blog's "full jitter" backoff:
// random(0, min(cap, base × 2^attempt)).
func FullJitter(attempt int, base, cap time.Duration) time.Duration {
	ceiling := cap
	if attempt < 62 {
		if d := base << uint(attempt); d > 0 && d < cap && d>>uint(attempt) == base {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}
