// Package testbin gives tests the bernstein binary and its HTTP server
// program bernstein-serve beside it, built once for a whole test run however
// many packages ask for them. `make test` builds both into bin/ first and
// names bin/bernstein in BERNSTEIN_TEST_BIN; without it, the first package
// to ask builds both into a cache shared by every package (under a lock,
// keyed by the module's source), and the others wait for it and use it.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Env names a bernstein binary to test instead of building one.
const Env = "BERNSTEIN_TEST_BIN"

var (
	once sync.Once
	path string
	err  error
)

// Path returns the bernstein binary: $BERNSTEIN_TEST_BIN, else the one built
// from this module's source (at most once per source, across processes).
// bernstein-serve is beside it (ServePath), where 'bernstein serve' finds it.
func Path() (string, error) {
	once.Do(func() { path, err = find() })
	return path, err
}

// ServeProgram is the name of the server program beside bernstein.
const ServeProgram = "bernstein-serve"

// ServePath returns bernstein-serve, beside the binary Path returns.
func ServePath() (string, error) {
	bin, err := Path()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(bin), ServeProgram), nil
}

func find() (string, error) {
	if p := os.Getenv(Env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file", Env, p)
		}
		serve := filepath.Join(filepath.Dir(abs), ServeProgram)
		if fi, err := os.Stat(serve); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s has no executable %s beside it: build both ('make build', or CGO_ENABLED=0 go build -o %s/ ./cmd/...)", Env, p, ServeProgram, filepath.Dir(p))
		}
		return abs, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(root)
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, key)
	bin := filepath.Join(dir, "bernstein")
	unlock, err := lock(filepath.Join(cache, key+".lock"), true)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		now := time.Now()
		os.Chtimes(dir, now, now) // in use: not pruned
		return bin, nil
	}
	prune(cache, key)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp) // what a killed build left
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-o", tmp+"/", "./cmd/bernstein", "./cmd/bernstein-serve")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as the Makefile builds them
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build bernstein and bernstein-serve: %v\n%s", err, out)
	}
	// The rename is what makes the binaries visible: never half-written,
	// never one without the other.
	os.RemoveAll(dir) // a directory without bernstein: nothing in use
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return bin, nil
}

// moduleRoot is the directory of this module's go.mod, above the test's
// working directory (its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/bernstein/bernstein\n") {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("testbin: not inside the bernstein module")
		}
		dir = up
	}
}

// sourceKey hashes what the binary is built from: every file of the
// module but tests, test data, documentation and the end-to-end tests
// (Go sources, go.mod and go.sum, the embedded assets), and the toolchain.
func sourceKey(root string) (string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin" || name == "docs" || name == "e2e") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".md") || !d.Type().IsRegular() {
			return nil
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, p := range files {
		rel, _ := filepath.Rel(root, p)
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", rel)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "bernstein-test-bin")
	return dir, os.MkdirAll(dir, 0o755)
}

// lock takes an exclusive lock on path; with wait, it waits for another
// process that holds it (one building the binary).
func lock(path string, wait bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// prune removes the binaries of other sources not used for a day (and not
// being built or used right now).
func prune(cache, keep string) {
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if !e.IsDir() || e.Name() == keep {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < 24*time.Hour {
			continue
		}
		if unlock, err := lock(filepath.Join(cache, e.Name()+".lock"), false); err == nil {
			os.RemoveAll(filepath.Join(cache, e.Name()))
			unlock()
		}
	}
}
