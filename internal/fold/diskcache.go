package fold

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

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

func (f *Folder) journalCacheDir() string {
	return filepath.Join(f.c.GitDir, "bernstein", "cache", "journal")
}

func journalCacheName(task string) string { return refs.EscapeTask(task) + ".json" }

func (f *Folder) journalCachePath(task string) string {
	return filepath.Join(f.journalCacheDir(), journalCacheName(task))
}

// listCacheAfter is how many of a view's reads of the journal cache open
// their files before the view lists the cache's directory once and opens
// only the files it holds: most tasks have no cache file (a journal of
// fewer than cacheMinRows rows), and a list of every task would otherwise
// try to open one for each. A read of a few tasks opens a few.
const listCacheAfter = 64

// cacheFiles is the journal cache's files as one view found them (Derived
// from its proof environment). A file written since the listing is not
// used by this view's reads, which fold from the chain as they would
// without it; one removed since fails to open, as before. Which files
// exist chooses only which to open: a file opened is MAC-checked as any.
type cacheFiles struct {
	mu     sync.Mutex
	reads  int
	names  map[string]bool // nil until listed
	failed bool            // the directory could not be listed: open each file
}

type cacheFilesKey struct{ f *Folder }

func (f *Folder) cacheFilesOf(env *proof.Env) *cacheFiles {
	return env.Derived(cacheFilesKey{f}, func() any { return &cacheFiles{} }).(*cacheFiles)
}

// mayHold reports whether the cache may hold name: false only when the
// view's listing lacks it.
func (c *cacheFiles) mayHold(dir, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil && !c.failed {
		if c.reads++; c.reads <= listCacheAfter {
			return true
		}
		c.names, c.failed = listDir(dir)
	}
	return c.failed || c.names[name]
}

// wrote adds name, a file this view's reads wrote, to the listing.
func (c *cacheFiles) wrote(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names != nil {
		c.names[name] = true
	}
}

// listDir lists the names in dir (none when it does not exist), in the
// directory's order; failed when it cannot be read.
func listDir(dir string) (names map[string]bool, failed bool) {
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, false
	}
	if err != nil {
		return nil, true
	}
	defer d.Close()
	list, err := d.Readdirnames(-1)
	if err != nil {
		return nil, true
	}
	names = make(map[string]bool, len(list))
	for _, n := range list {
		names[n] = true
	}
	return names, false
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
	if !f.cacheFilesOf(env).mayHold(f.journalCacheDir(), journalCacheName(task)) {
		return gitstore.ZeroOid, nil, false
	}
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
		return
	}
	f.cacheFilesOf(env).wrote(journalCacheName(task))
}
