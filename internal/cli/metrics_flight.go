package cli

import (
	"fmt"
	"strings"

	"github.com/pgoutbox/pgoutbox/dispatcher"
)

// writeFlightGauges writes what this process holds under lease right now:
// what a crash (SIGKILL, OOM) of this process would strand until the leases
// expire, and the adaptive claim size behind it.
func writeFlightGauges(b *strings.Builder, s *dispatcher.Stats) {
	header(b, "pgoutbox_messages_in_flight", "Messages claimed by this process and not yet finalized or handed back (what a crash would leave to lease expiry).", "gauge")
	fmt.Fprintf(b, "pgoutbox_messages_in_flight %d\n", s.InFlight)
	header(b, "pgoutbox_claim_size", "The current adaptive claim size (between --batch-min and --batch).", "gauge")
	fmt.Fprintf(b, "pgoutbox_claim_size %d\n", s.ClaimSize)
}
