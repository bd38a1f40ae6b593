package fold

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/proof"
	"github.com/bernstein/bernstein/refs"
)

// The journal fold (per-key versions, the journal half of the progress
// vector, which rows counted) is cached on disk by journal head commit, so a
// process that starts cold folds and proves only the rows written since. The
// cache is derived data, and it is never trusted as it is found: each file
// carries an HMAC under a key only the local writer holds (derived from its
// HMAC key), over the file's content and the trust it was computed under (the
// pinned keys and the published keys' commit). A file that does not check,
// or a process without the writer's key, folds from the chain; a poisoned
// cache changes nothing visible. The cache lives under
// <git dir>/bernstein/cache, is never pushed, and deleting it changes no
// output. An entry is used only when its head is an ancestor of the
// journal's head, which walking the chain back proves.

// cacheMinRows is how many newly folded rows make writing the cache worth it.
const cacheMinRows = 32

type journalCacheFile struct {
	Head  string   `json:"head"`
	Keys  string   `json:"keys"`
	State *Journal `json:"state"`
}

// cacheDomain separates the cache's MACs from the audit mirror's, which are
// made with the same writer key.
const cacheDomain = "bernstein journal fold cache v2\n"

func (f *Folder) journalCachePath(task string) string {
	return filepath.Join(f.c.GitDir, "bernstein", "cache", "journal", refs.EscapeTask(task)+".json")
}

// cacheMACInput is what a cache file's MAC covers: its content and the
// trust it was computed under.
func cacheMACInput(env *proof.Env, content []byte) []byte {
	var b bytes.Buffer
	b.WriteString(cacheDomain)
	b.WriteString(env.Trust.Fingerprint())
	b.WriteString("\n--\n")
	b.Write(content)
	return b.Bytes()
}

// loadJournalCache returns the cached fold of task, if there is one whose
// MAC checks under env.
func (f *Folder) loadJournalCache(env *proof.Env, task string) (gitstore.Oid, *Journal, bool) {
	b, err := os.ReadFile(f.journalCachePath(task))
	if err != nil {
		return gitstore.ZeroOid, nil, false
	}
	mac, content, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return gitstore.ZeroOid, nil, false
	}
	id, err := f.c.Identity()
	if err != nil || !id.CheckMAC(cacheMACInput(env, content), string(mac)) {
		return gitstore.ZeroOid, nil, false
	}
	var file journalCacheFile
	if json.Unmarshal(content, &file) != nil || file.State == nil || file.State.Task != task || file.Keys != env.Version.String() {
		return gitstore.ZeroOid, nil, false
	}
	head, err := gitstore.ParseOid(file.Head)
	if err != nil {
		return gitstore.ZeroOid, nil, false
	}
	if file.State.Keys == nil {
		file.State.Keys = map[string]KeyState{}
	}
	return head, file.State, true
}

// saveJournalCache writes the fold at head; failures are ignored (a
// read-only repository, or a process without the writer's key, simply has
// no cache).
func (f *Folder) saveJournalCache(env *proof.Env, task string, head gitstore.Oid, st *Journal) {
	content, err := json.Marshal(journalCacheFile{Head: head.String(), Keys: env.Version.String(), State: st})
	if err != nil {
		return
	}
	id, err := f.c.Identity()
	if err != nil {
		return
	}
	mac := id.MAC(cacheMACInput(env, content))
	path := f.journalCachePath(task)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	var r [6]byte
	rand.Read(r[:])
	tmp := path + ".tmp-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(tmp, append(append([]byte(mac), '\n'), content...), 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
	}
}
