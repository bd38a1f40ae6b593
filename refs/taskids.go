package refs

import (
	"sort"
	"strings"
)

// TaskIDs lists the tasks that have a ledger among src's refs, sorted. A
// ledger ref whose name does not unescape to a task id is not bernstein's
// and is left out. A snapshot's ledger refs whose loose file is not an
// object id are listed (a read of their task answers a *BadRefError).
func TaskIDs(src Source) ([]string, error) {
	_, names, err := src.List(LedgerPrefix)
	if err != nil {
		return nil, err
	}
	for _, b := range BadLooseOf(src, LedgerPrefix) {
		names = append(names, b.Ref)
	}
	var out []string
	for _, n := range names {
		if id, err := UnescapeTask(strings.TrimPrefix(n, LedgerPrefix)); err == nil {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}
