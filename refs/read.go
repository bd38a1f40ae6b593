package refs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// ErrNotFound reports a ref that does not exist.
var ErrNotFound = errors.New("ref not found")

// Reader reads refs from a git directory's files backend: loose ref files,
// then packed-refs.
type Reader struct {
	Dir string // the common git directory (where refs/ and packed-refs live)
}

// Read returns the object id ref points at.
func (r Reader) Read(ref string) (gitstore.Oid, error) {
	b, err := os.ReadFile(filepath.Join(r.Dir, filepath.FromSlash(ref)))
	if err == nil {
		s := strings.TrimSpace(string(b))
		if strings.HasPrefix(s, "ref: ") {
			return gitstore.ZeroOid, fmt.Errorf("%s is a symbolic ref", ref)
		}
		o, err := gitstore.ParseOid(s)
		if err != nil {
			return o, fmt.Errorf("ref %s: %w", ref, err)
		}
		return o, nil
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscallEISDIR) {
		return gitstore.ZeroOid, err
	}
	packed, err := r.packed()
	if err != nil {
		return gitstore.ZeroOid, err
	}
	if o, ok := packed[ref]; ok {
		return o, nil
	}
	return gitstore.ZeroOid, ErrNotFound
}

// ReadOptional is Read with a missing ref reported as the zero id.
func (r Reader) ReadOptional(ref string) (gitstore.Oid, error) {
	o, err := r.Read(ref)
	if errors.Is(err, ErrNotFound) {
		return gitstore.ZeroOid, nil
	}
	return o, err
}

func (r Reader) packed() (map[string]gitstore.Oid, error) {
	m := map[string]gitstore.Oid{}
	b, err := os.ReadFile(filepath.Join(r.Dir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		h, name, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		o, err := gitstore.ParseOid(h)
		if err != nil {
			return nil, fmt.Errorf("packed-refs: %w", err)
		}
		m[name] = o
	}
	return m, sc.Err()
}

// List returns every ref under prefix (which ends in '/') with its value,
// loose refs overriding packed ones, sorted by name.
func (r Reader) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	packed, err := r.packed()
	if err != nil {
		return nil, nil, err
	}
	out := map[string]gitstore.Oid{}
	for name, o := range packed {
		if strings.HasPrefix(name, prefix) {
			out[name] = o
		}
	}
	root := filepath.Join(r.Dir, filepath.FromSlash(prefix))
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasSuffix(path, ".lock") {
			return nil
		}
		rel, err := filepath.Rel(r.Dir, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		o, err := gitstore.ParseOid(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("ref %s: %w", name, err)
		}
		out[name] = o
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	return out, names, nil
}
