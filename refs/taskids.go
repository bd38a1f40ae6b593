package refs

import (
	"sort"
	"strings"
)

// TaskIDs lists the tasks that have a ledger among src's refs, sorted. A
// ledger ref whose name does not unescape to a task id is not bernstein's
// and is left out.
func TaskIDs(src Source) ([]string, error) {
	_, names, err := src.List(LedgerPrefix)
	if err != nil {
		return nil, err
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
