package refs

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// An Intent is the durable record of one ref transaction: every ref it
// moves, from which old value to which new one. It is written (and synced)
// before the first ref lock is taken and removed after the last rename is
// durable, so a writer killed at any instant leaves either no intent (nothing
// moved) or an intent the next writer can finish or discard. The store keeps
// it in the .keep file that protects the transaction's pack, so that one
// file both shields the new objects from git maintenance and says which refs
// will reach them.
type Intent struct {
	Updates []Update
}

// intentHeader starts every intent; keep files that do not start with it are
// git's or a user's and never read as intents.
const intentHeader = "bernstein intent v1"

// IntentPrefix is the first word every intent starts with.
const IntentPrefix = "bernstein "

// Encode renders the intent as text, updates in commit order.
func (in Intent) Encode() string {
	us := append([]Update(nil), in.Updates...)
	Order(us)
	var b strings.Builder
	b.WriteString(intentHeader)
	b.WriteByte('\n')
	for _, u := range us {
		fmt.Fprintf(&b, "update %s %s %s\n", u.Ref, u.Old, u.New)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ParseIntent reads an intent. ok is false for text that is not an intent at
// all (a keep file of git's or a user's).
func ParseIntent(data []byte) (in Intent, ok bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != intentHeader {
		return Intent{}, false, nil
	}
	seen := map[string]bool{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "update" || !strings.HasPrefix(f[1], Prefix) || strings.Contains(f[1], "..") {
			return Intent{}, true, fmt.Errorf("intent: bad line %q", line)
		}
		old, err1 := gitstore.ParseOid(f[2])
		nw, err2 := gitstore.ParseOid(f[3])
		if err1 != nil || err2 != nil || nw.IsZero() && old.IsZero() || old == nw || seen[f[1]] {
			return Intent{}, true, fmt.Errorf("intent: bad update %q", line)
		}
		seen[f[1]] = true
		in.Updates = append(in.Updates, Update{Ref: f[1], Old: old, New: nw})
	}
	if err := sc.Err(); err != nil {
		return Intent{}, true, err
	}
	if len(in.Updates) == 0 {
		return Intent{}, true, fmt.Errorf("intent: no updates")
	}
	return in, true, nil
}

// rank orders namespaces for the renames: what seals and mirrors a row moves
// before the row itself, so the journal (and the ledger) move last and a
// state seen between two renames reads as a spine entry not yet joined by
// its row, never as a row without its seal.
func rank(ref string) int {
	switch {
	case ref == Repository, ref == Keys, strings.HasPrefix(ref, WritersPrefix):
		return 0
	case strings.HasPrefix(ref, SpinePrefix):
		return 1
	case strings.HasPrefix(ref, AuditPrefix), strings.HasPrefix(ref, AnchorsPrefix), strings.HasPrefix(ref, ForksPrefix),
		strings.HasPrefix(ref, CheckpointsPrefix):
		return 2
	case strings.HasPrefix(ref, LedgerPrefix):
		return 3
	case strings.HasPrefix(ref, JournalPrefix):
		return 5
	}
	return 4
}

// Order sorts updates into the fixed commit order: the deletions after
// every other update (one of which is the commit point), and each part by
// namespace (keys, spines, audit mirrors, ledgers, anything else,
// journals), then by name.
func Order(us []Update) {
	sort.Slice(us, func(i, j int) bool {
		if di, dj := us[i].Deletes(), us[j].Deletes(); di != dj {
			return dj
		}
		ri, rj := rank(us[i].Ref), rank(us[j].Ref)
		if ri != rj {
			return ri < rj
		}
		return us[i].Ref < us[j].Ref
	})
}

// committed decides an intent's fate from the refs' current values: it took
// effect when any ref it moves to a value (not a deletion) already holds
// that value (every lock was taken and every old value checked before the
// first rename, which is never a deletion's), and it never did when none
// does. A deletion is no evidence: a ref someone else deleted reads as
// deleted whether or not the intent took effect. cur returns a ref's value
// now.
func (in Intent) committed(cur func(string) (gitstore.Oid, error)) (bool, error) {
	for _, u := range in.Updates {
		if u.Deletes() {
			continue
		}
		v, err := cur(u.Ref)
		if err != nil {
			return false, err
		}
		if v == u.New {
			return true, nil
		}
	}
	return false, nil
}
