package dispatcher

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
)

// defaultOwner is the default Config.Owner: host and pid, for people. What
// makes each claim's lease_owner unique is claimTokens, not this name.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// claimTokenChars is the most a claimTokens suffix adds to the owner name:
// "/", 16 hex digits of run id, ".", a uint64 in decimal.
const claimTokenChars = 1 + 16 + 1 + 20

// claimTokens hands out the lease_owner each claim writes:
// "<owner>/<run id>.<claim number>", where the run id is 8 random bytes
// drawn once per Dispatcher and the claim number counts this Dispatcher's
// claims. The fence of every write after a claim is (lease_owner,
// lease_version), and this makes that pair unique to one claim even when
// lease_version is not: after a failover to an asynchronous standby that
// never received the last claims, a row's lease_version goes back and the
// next claim (by anyone, this Dispatcher included) hands the same version out
// again. A claim lost that way keeps a token that no row carries any more,
// so its finalize, retry, defer, dead, heartbeat and hand-back all get 0
// rows. Two Dispatchers configured with the same Owner, or one restarted,
// differ by run id.
type claimTokens struct {
	prefix string // "<owner>/<run id>."
	n      atomic.Uint64
}

func newClaimTokens(owner string) *claimTokens {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	return &claimTokens{prefix: owner + "/" + hex.EncodeToString(b) + "."}
}

// next returns the lease_owner of a new claim.
func (c *claimTokens) next() string {
	return c.prefix + strconv.FormatUint(c.n.Add(1), 10)
}
