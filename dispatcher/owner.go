package dispatcher

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// defaultOwner is unique per process and per Dispatcher: host, pid, random.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
