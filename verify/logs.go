package verify

import (
	"fmt"
	"sort"
)

// CheckWitnessLog is the check of a writer's log against its cosigned
// checkpoints (docs/trust.md, Witnesses).
const CheckWitnessLog = "witness_log"

// LogCoverage is what the checks of the writers' logs found on this host,
// which configures witnesses: how many of each writer's spine entries a
// checkpoint cosigned by the quorum covers, and why none does.
type LogCoverage struct {
	Cosigned map[string]int64  // by writer: entries the cosigned checkpoint covers
	Why      map[string]string // by writer: why its entries are not covered
	Tampered map[string]string // by writer: its log was rolled back, forked or forged
}

// covers says whether entry seq of writer's spine is covered, and why not.
func (c *LogCoverage) covers(writer string, seq int64) (bool, string) {
	if why, ok := c.Tampered[writer]; ok {
		return false, why
	}
	n := c.Cosigned[writer]
	if seq < n {
		return true, ""
	}
	why := c.Why[writer]
	if why == "" {
		why = fmt.Sprintf("the cosigned checkpoint covers %d entries", n)
	}
	return false, fmt.Sprintf("entry %d of writer %s's log is not covered by a checkpoint the witnesses' quorum cosigned: %s", seq, writer, why)
}

// failures are the tampered logs, as audit verify reports them.
func (c *LogCoverage) failures() []Failure {
	var ws []string
	for w := range c.Tampered {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	var out []Failure
	for _, w := range ws {
		out = append(out, Failure{Writer: w, Check: CheckWitnessLog, Reason: c.Tampered[w]})
	}
	return out
}
