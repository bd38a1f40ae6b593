package refs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/bernstein/bernstein/gitstore"
)

// ErrNotFound reports a ref that does not exist.
var ErrNotFound = errors.New("ref not found")

// Reader reads refs from a git directory's files backend: loose ref files,
// then packed-refs.
type Reader struct {
	Dir string // the common git directory (where refs/ and packed-refs live)
	// Archive, when set, makes a Snapshot covering task refs answer them
	// from the archive of ended tasks too, and Names list archived tasks
	// (refs/archive.go). Read, ReadOptional and List read refs alone.
	Archive ArchiveIndex
	// testHookBetweenReads, when set, runs between a snapshot's reads of
	// loose refs and of packed-refs.
	testHookBetweenReads func()
}

// Read returns the object id ref points at.
func (r Reader) Read(ref string) (gitstore.Oid, error) {
	o, err := r.readLoose(ref)
	if err != errNoLoose {
		return o, err
	}
	p, err := openPacked(r.Dir)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	defer p.close()
	o, ok, err := p.lookup(ref)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	if !ok {
		return gitstore.ZeroOid, ErrNotFound
	}
	return o, nil
}

// errNoLoose reports that a ref has no loose file (it may be packed).
var errNoLoose = errors.New("no loose ref")

// readLoose reads ref's loose file.
func (r Reader) readLoose(ref string) (gitstore.Oid, error) {
	return readLooseFile(filepath.Join(r.Dir, filepath.FromSlash(ref)), ref)
}

// readLooseFile reads the loose file at path of ref: open, read, close,
// with no stat and no buffer beyond the stack's for a file of one object
// id (a larger one is read whole, as before). The file is read with plain
// system calls, not an *os.File: opening one costs four more calls (its
// descriptor made non-blocking and back, and refused by the poller) and a
// finalizer, for each of the two loose refs a task has.
func readLooseFile(path, ref string) (gitstore.Oid, error) {
	var buf [128]byte
	b, err := readFileRaw(path, buf[:0])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscallEISDIR) {
			return gitstore.ZeroOid, errNoLoose
		}
		return gitstore.ZeroOid, err
	}
	s := strings.TrimSpace(string(b))
	var bad error
	if strings.HasPrefix(s, "ref: ") {
		bad = fmt.Errorf("its loose file is a symbolic ref (%q)", s)
	}
	o, err := gitstore.ParseOid(s)
	if bad == nil && err != nil {
		bad = fmt.Errorf("its loose file holds no object id: %w", err)
	}
	if bad == nil {
		return o, nil
	}
	if _, task := TaskOf(ref); task {
		return gitstore.ZeroOid, &looseError{ref, bad}
	}
	// Any other ref reads as the stand-in of its file's bytes, which names
	// no object: every reader of the ref reads past it as it reads past a
	// ref naming an object the repository does not have, and a writer's
	// compare-and-swap over the file holds while it holds those bytes.
	return gitstore.LooseStandIn(b), nil
}

// readFileRaw reads the file at path to its end into b (grown when the
// file does not fit), with the errors os.Open and Read would give.
func readFileRaw(path string, b []byte) ([]byte, error) {
	var fd int
	var err error
	for {
		if fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return b, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// looseError is a loose ref file whose content is not an object id: what
// plain git can write and no bernstein writer does.
type looseError struct {
	ref string
	err error
}

func (e *looseError) Error() string { return fmt.Sprintf("ref %s: %v", e.ref, e.err) }

func (e *looseError) Unwrap() error { return e.err }

// badLoose returns the BadRef of a journal or ledger ref whose loose file
// is not an object id (err a *looseError): a snapshot reads past it, and
// its task is tampered. Any other ref's such file reads as its
// gitstore.LooseStandIn (readLoose).
func badLoose(err error) (BadRef, bool) {
	var le *looseError
	if !errors.As(err, &le) {
		return BadRef{}, false
	}
	if _, ok := TaskOf(le.ref); !ok {
		return BadRef{}, false
	}
	return BadRef{Ref: le.ref, Reason: le.err.Error()}, true
}

// ReadOptional is Read with a missing ref reported as the zero id.
func (r Reader) ReadOptional(ref string) (gitstore.Oid, error) {
	o, err := r.Read(ref)
	if errors.Is(err, ErrNotFound) {
		return gitstore.ZeroOid, nil
	}
	return o, err
}

// InconsistentError reports a ref store that holds two values for one ref
// (packed-refs listing a ref twice): git and bernstein could read different
// heads, so bernstein reads neither. It says nothing of the chain the ref
// names; the ref store itself needs repair.
type InconsistentError struct {
	Path   string // the file at fault
	Ref    string
	Values []gitstore.Oid
}

func (e *InconsistentError) Error() string {
	return fmt.Sprintf("the ref store is inconsistent: %s holds two values for %s (%s and %s), so git and bernstein could read different heads; bernstein reads neither. repair it (delete from it the line of the value the ref should not hold), then run 'bernstein audit verify'",
		e.Path, e.Ref, e.Values[0], e.Values[1])
}

// ErrInconsistent matches an InconsistentError with errors.Is.
var ErrInconsistent = errors.New("the ref store is inconsistent")

// Is makes errors.Is(err, ErrInconsistent) hold.
func (e *InconsistentError) Is(target error) bool { return target == ErrInconsistent }

// List returns every ref under prefix (which ends in '/') with its value,
// loose refs overriding packed ones, sorted by name. As git does, it reads
// the loose refs before packed-refs: `git pack-refs` writes packed-refs
// before it prunes the loose files, so no ref slips between the two reads.
func (r Reader) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	out := map[string]gitstore.Oid{}
	if err := r.walkLoose(prefix, func(name string, o gitstore.Oid) { out[name] = o }, nil); err != nil {
		return nil, nil, err
	}
	p, err := openPacked(r.Dir)
	if err != nil {
		return nil, nil, err
	}
	defer p.close()
	err = p.each(prefix, func(name string, o gitstore.Oid) {
		if _, loose := out[name]; !loose {
			out[name] = o
		}
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

// walkLoose calls fn for every loose ref under prefix; with bad set, bad
// for every journal or ledger ref whose file is not an object id
// (badLoose), which fails the walk otherwise.
func (r Reader) walkLoose(prefix string, fn func(string, gitstore.Oid), bad func(BadRef)) error {
	return r.walkLooseDir(filepath.Join(r.Dir, filepath.FromSlash(prefix)), prefix, fn, bad)
}

// dirOpened, when set (by tests), is called with each directory of loose
// refs a walk has opened, before it reads its entries.
var dirOpened func(dir string)

// readRefDir reads the entries of a directory of loose refs, in its own
// order; one that does not exist, or is removed while it is read (git
// pack-refs prunes the directories it empties: getdents then fails with
// ENOENT), holds none.
func readRefDir(dir string) ([]fs.DirEntry, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if dirOpened != nil {
		dirOpened(dir)
	}
	ents, err := f.ReadDir(-1)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return ents, err
}

// walkLooseDir reads the loose refs under dir, whose ref names start with
// name, in the directory's own order: a snapshot sorts the names once,
// so no directory is sorted (a directory of 100,000 refs was sorted
// for every snapshot).
func (r Reader) walkLooseDir(dir, name string, fn func(string, gitstore.Oid), bad func(BadRef)) error {
	ents, err := readRefDir(dir)
	if errors.Is(err, syscall.ENOTDIR) {
		return nil // a file where a directory of refs would be holds none
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		path := dir + string(filepath.Separator) + n
		if e.IsDir() {
			if err := r.walkLooseDir(path, name+n+"/", fn, bad); err != nil {
				return err
			}
			continue
		}
		if strings.HasSuffix(n, ".lock") {
			continue
		}
		ref := name + n
		o, err := readLooseFile(path, ref)
		if err == errNoLoose {
			continue // deleted meanwhile: packed-refs, read before, holds it
		}
		if b, ok := badLoose(err); ok && bad != nil {
			bad(b)
			continue
		}
		if err != nil {
			return err
		}
		fn(ref, o)
	}
	return nil
}

// Source is what a reader of refs needs: one ref, or every ref under a
// prefix. Reader reads the files as they are now; a Snapshot answers from one
// consistent view.
type Source interface {
	ReadOptional(ref string) (gitstore.Oid, error)
	List(prefix string) (map[string]gitstore.Oid, []string, error)
}

// Snapshot is the refs of a scope as they stood at one instant: read while
// writers were held off their renames, with any transaction a killed writer
// committed but did not finish taken as finished. A reader that works from
// one Snapshot never sees a post half moved.
type Snapshot struct {
	vals  map[string]gitstore.Oid
	names []string // sorted
	scope []string
	// archived names the task refs whose value is an archive entry's, with
	// the archive ref it came from (FromArchive).
	archived    map[string]string
	divergences []Divergence
	badArchives []BadRef // archive refs read past (BadArchives)
	// badLoose holds the loose refs whose file is not an object id, read
	// past (BadLoose): each reads as a *BadRefError, never as a packed
	// value of the same ref.
	badLoose map[string]BadRef

	derivedMu sync.Mutex
	derived   map[any]any // Derived
}

// Derived returns what make derives from the snapshot under key, made
// once and kept for as long as the snapshot lives: what every read of one
// view would otherwise derive again (a reader's proof environment). An
// error is returned and not kept.
func (s *Snapshot) Derived(key any, make func() (any, error)) (any, error) {
	s.derivedMu.Lock()
	v, ok := s.derived[key]
	s.derivedMu.Unlock()
	if ok {
		return v, nil
	}
	v, err := make()
	if err != nil {
		return nil, err
	}
	s.derivedMu.Lock()
	defer s.derivedMu.Unlock()
	if kept, ok := s.derived[key]; ok {
		return kept, nil
	}
	if s.derived == nil {
		s.derived = map[any]any{}
	}
	s.derived[key] = v
	return v, nil
}

// Snapshot reads the refs scope names: a name ending in '/' is a prefix
// (every ref under it), any other is one ref.
func (r Reader) Snapshot(scope ...string) (*Snapshot, error) {
	am := archiveScope(scope)
	if r.Archive != nil && am.any() {
		// The archive refs are read in the same instant as the task refs: a
		// task moved into an archive is in one or the other, never neither.
		scope = append(append([]string(nil), scope...), ArchivePrefix)
	}
	s, err := r.snapshot(scope)
	if err != nil {
		return nil, err
	}
	// The archives' trees are read once the refs are: writers need not
	// wait for them.
	if r.Archive != nil && am.any() {
		if err := s.resolveArchives(r.Archive, am); err != nil {
			return nil, err
		}
	}
	for name, o := range s.vals {
		if o.IsZero() {
			delete(s.vals, name)
			continue
		}
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s, nil
}

// snapshot reads the refs of scope while writers are held off their
// renames, with a killed writer's committed transaction taken as finished.
func (r Reader) snapshot(scope []string) (*Snapshot, error) {
	unlock := shareWithReaders(r.Dir)
	defer unlock()
	s := &Snapshot{vals: map[string]gitstore.Oid{}, scope: scope, badLoose: map[string]BadRef{}}
	// Loose refs first, then packed-refs (see List).
	loose := map[string]bool{}
	bad := func(b BadRef) { s.badLoose[b.Ref] = b }
	for _, sc := range scope {
		if !strings.HasSuffix(sc, "/") {
			o, err := r.readLoose(sc)
			if err == errNoLoose {
				continue
			}
			if b, ok := badLoose(err); ok {
				bad(b)
				continue
			}
			if err != nil {
				return nil, err
			}
			s.vals[sc], loose[sc] = o, true
			continue
		}
		err := r.walkLoose(sc, func(name string, o gitstore.Oid) { s.vals[name], loose[name] = o, true }, bad)
		if err != nil {
			return nil, err
		}
	}
	if r.testHookBetweenReads != nil {
		r.testHookBetweenReads()
	}
	p, err := openPacked(r.Dir)
	if err != nil {
		return nil, err
	}
	defer p.close()
	// Each scope entry reads its own part of packed-refs: a ref by a
	// lookup, a prefix by the records under it.
	for _, sc := range scope {
		if !strings.HasSuffix(sc, "/") {
			o, ok, err := p.lookup(sc)
			if err != nil {
				return nil, err
			}
			if ok && !loose[sc] {
				s.vals[sc] = o
			}
			continue
		}
		err := p.each(sc, func(name string, o gitstore.Oid) {
			if !loose[name] {
				s.vals[name] = o
			}
		})
		if err != nil {
			return nil, err
		}
	}
	read := func(ref string) (gitstore.Oid, error) {
		o, err := r.readLoose(ref)
		if err == errNoLoose {
			return r.ReadOptional(ref)
		}
		return o, err
	}
	// A transaction a killed writer committed reads as finished: every ref
	// still at its old value takes the new one, as Recover will make it.
	pending, err := PendingIntents(filepath.Join(r.Dir, "objects", "pack"))
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		cur := func(ref string) (gitstore.Oid, error) {
			if s.covers(ref) {
				return s.vals[ref], nil
			}
			return read(ref)
		}
		ok, err := p.Intent.committed(cur)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, u := range p.Intent.Updates {
			if s.covers(u.Ref) && s.vals[u.Ref] == u.Old {
				s.vals[u.Ref] = u.New
			}
		}
	}
	// A loose file that is not an object id hides any packed value of its
	// ref, as in git, which reads the loose file first: the ref is read
	// past, never read as the packed value.
	for ref := range s.badLoose {
		delete(s.vals, ref)
	}
	return s, nil
}

func (s *Snapshot) covers(ref string) bool {
	for _, sc := range s.scope {
		if sc == ref || strings.HasSuffix(sc, "/") && strings.HasPrefix(ref, sc) {
			return true
		}
	}
	return false
}

// ErrNotInSnapshot reports a read outside the scope a snapshot was taken of.
var ErrNotInSnapshot = errors.New("ref was not read in this snapshot")

// ReadOptional returns ref's value in the snapshot, zero when it did not exist.
func (s *Snapshot) ReadOptional(ref string) (gitstore.Oid, error) {
	if !s.covers(ref) {
		return gitstore.ZeroOid, fmt.Errorf("%w: %s", ErrNotInSnapshot, ref)
	}
	if b, ok := s.badLoose[ref]; ok {
		return gitstore.ZeroOid, &BadRefError{BadRef: b, Err: errors.New(b.Reason)}
	}
	return s.vals[ref], nil
}

// BadLooseOf is src's BadLoose(prefix) when src is a Snapshot, none
// otherwise (a Reader fails a read of such a ref).
func BadLooseOf(src Source, prefix string) []BadRef {
	if s, ok := src.(*Snapshot); ok {
		return s.BadLoose(prefix)
	}
	return nil
}

// BadLoose lists the refs under prefix whose loose file is not an object
// id, sorted by ref: the snapshot read past them (List leaves them out,
// ReadOptional answers each with a *BadRefError).
func (s *Snapshot) BadLoose(prefix string) []BadRef {
	var out []BadRef
	for ref, b := range s.badLoose {
		if strings.HasPrefix(ref, prefix) {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// List returns every ref under prefix in the snapshot, sorted by name.
func (s *Snapshot) List(prefix string) (map[string]gitstore.Oid, []string, error) {
	if !s.covers(prefix) {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotInSnapshot, prefix)
	}
	out := map[string]gitstore.Oid{}
	var names []string
	i := sort.SearchStrings(s.names, prefix)
	for ; i < len(s.names) && strings.HasPrefix(s.names[i], prefix); i++ {
		out[s.names[i]] = s.vals[s.names[i]]
		names = append(names, s.names[i])
	}
	return out, names, nil
}

// Names lists the names of the refs under prefix (which ends in '/'),
// sorted, without reading their values: a directory walk and the names of
// packed-refs, no file of a loose ref opened; with an Archive, the names of
// the journal and ledger refs of archived tasks too (each archive's task
// names, no task's heads). It is what a listing uses to
// choose a page; the page's refs are then read in one Snapshot.
func (r Reader) Names(prefix string) ([]string, error) {
	names, _, err := r.NamesReadPast(prefix)
	return names, err
}

// NamesReadPast is Names, with the archive refs whose task names could not
// be read (they add none): what a listing reports it read past.
func (r Reader) NamesReadPast(prefix string) ([]string, []BadRef, error) {
	seen := map[string]bool{}
	bad, err := r.EachName(prefix, func(name string) { seen[name] = true })
	if err != nil {
		return nil, nil, err
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, bad, nil
}

// EachName calls fn with the name of every ref under prefix (which ends in
// '/'), as Names finds them, in no order, and a name once for each place
// it is in (a loose file, packed-refs, an archive): what a page that keeps
// only a few of the names needs, without the map and sort of every name.
// The loose refs' directories are read unsorted. It returns the archive
// refs whose task names could not be read, as NamesReadPast does.
func (r Reader) EachName(prefix string, fn func(name string)) ([]BadRef, error) {
	if err := walkNames(filepath.Join(r.Dir, filepath.FromSlash(prefix)), prefix, fn); err != nil {
		return nil, err
	}
	p, err := openPacked(r.Dir)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.each(prefix, func(name string, _ gitstore.Oid) { fn(name) }); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	bad, err := r.archivedNames(prefix, seen)
	if err != nil {
		return nil, err
	}
	for n := range seen {
		fn(n)
	}
	return bad, nil
}

// walkNames calls fn with name+the path below dir of every file under
// dir but lock files (a missing dir has none).
func walkNames(dir, name string, fn func(string)) error {
	ents, err := readRefDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		switch {
		case e.IsDir():
			if err := walkNames(dir+string(filepath.Separator)+n, name+n+"/", fn); err != nil {
				return err
			}
		case !strings.HasSuffix(n, ".lock"):
			fn(name + n)
		}
	}
	return nil
}
