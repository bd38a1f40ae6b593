package bernstein

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/refs"
)

// The journal fold (per-key versions and the journal half of the progress
// vector) is cached on disk by journal head commit, so a process that starts
// cold folds only the rows written since. The cache is derived data: it lives
// under <git dir>/bernstein/cache, is never pushed, and deleting it changes
// no output. A cache entry is used only when its head is an ancestor of the
// journal's head, which walking the chain back proves.

// cacheMinRows is how many newly folded rows make writing the cache worth it.
const cacheMinRows = 32

type journalCacheFile struct {
	Head  string        `json:"head"`
	State *journalState `json:"state"`
}

func (s *Store) journalCachePath(task string) string {
	return filepath.Join(s.gitDir, "bernstein", "cache", "journal", refs.EscapeTask(task)+".json")
}

// loadJournalCache returns the cached fold of task, if any.
func (s *Store) loadJournalCache(task string) (gitstore.Oid, *journalState, bool) {
	b, err := os.ReadFile(s.journalCachePath(task))
	if err != nil {
		return gitstore.ZeroOid, nil, false
	}
	var f journalCacheFile
	if json.Unmarshal(b, &f) != nil || f.State == nil || f.State.Task != task {
		return gitstore.ZeroOid, nil, false
	}
	head, err := gitstore.ParseOid(f.Head)
	if err != nil {
		return gitstore.ZeroOid, nil, false
	}
	if f.State.Keys == nil {
		f.State.Keys = map[string]keyState{}
	}
	return head, f.State, true
}

// saveJournalCache writes the fold at head; failures are ignored (a
// read-only repository simply has no cache).
func (s *Store) saveJournalCache(task string, head gitstore.Oid, st *journalState) {
	path := s.journalCachePath(task)
	b, err := json.Marshal(journalCacheFile{Head: head.String(), State: st})
	if err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	var r [6]byte
	rand.Read(r[:])
	tmp := path + ".tmp-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
	}
}
