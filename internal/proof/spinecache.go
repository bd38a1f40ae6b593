package proof

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/bernstein/bernstein/internal/core"
)

// spineCache keeps each writer's spine index (verify/spinecache.go) under
// <git dir>/bernstein/cache/spine/, one file a writer: a line with an HMAC
// under a key only the local writer holds, then the index. A file whose MAC
// does not check, or a process without the writer's key, reads as nothing
// kept: the spines are walked. Deleting the folder changes no output.
type spineCache struct{ c *core.Repo }

// spineCacheDomain separates these MACs from the audit mirror's and the
// fold cache's, made with the same writer key.
const spineCacheDomain = "bernstein spine index cache v1\n"

func (s spineCache) path(writer string) string {
	return filepath.Join(s.c.GitDir, "bernstein", "cache", "spine", hex.EncodeToString([]byte(writer))+".idx")
}

func spineMACInput(writer string, content []byte) []byte {
	var b bytes.Buffer
	b.WriteString(spineCacheDomain)
	b.WriteString(writer)
	b.WriteString("\n--\n")
	b.Write(content)
	return b.Bytes()
}

// Load returns the index kept for writer when its MAC checks.
func (s spineCache) Load(writer string) []byte {
	b, err := os.ReadFile(s.path(writer))
	if err != nil {
		return nil
	}
	mac, content, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil
	}
	id, err := s.c.Identity()
	if err != nil || !id.CheckMAC(spineMACInput(writer, content), string(mac)) {
		return nil
	}
	return content
}

// Save keeps data as writer's index; failures are ignored (a read-only
// repository, or a process without the writer's key, keeps nothing).
func (s spineCache) Save(writer string, data []byte) {
	if data == nil {
		return
	}
	id, err := s.c.Identity()
	if err != nil {
		return
	}
	mac := id.MAC(spineMACInput(writer, data))
	path := s.path(writer)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	var r [6]byte
	rand.Read(r[:])
	tmp := path + ".tmp-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(tmp, append(append([]byte(mac), '\n'), data...), 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
	}
}
