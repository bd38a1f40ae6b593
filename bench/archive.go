package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bernstein/bernstein/internal/archive"
)

// The archive section measures the layout of docs/archive.md: what moving
// the refs of ended tasks into one archive ref per writer buys a push and a
// fetch of one post, and what listing the archive costs against listing the
// refs. The tasks' chains are written with git fast-import; the archive
// commits are built through internal/archive (the codec bernstein will
// write them with) and written as packs through gitstore, so the figures are
// git's own over the package's objects.

var (
	flagArchiveTasks = flag.Int("archive-tasks", 10000, "archive: tasks in each repository")
	flagArchiveEnded = flag.Int("archive-ended", 90, "archive: percent of the tasks ended and archived")
	flagArchiveBatch = flag.Int("archive-batch", 256, "archive: tasks per archive commit")
)

const archiveRef = "refs/bernstein/archive/w1"

// protoRepo is the prototype: one object store, two ref layouts.
type protoRepo struct {
	src    string            // the repository holding every object
	heads  map[string]string // chain ref -> head commit
	arch   string            // the archive ref's head
	prev   string            // the archive commit before it ("" if none)
	lastN  int               // the tasks the last archive commit adds
	open   []string          // the refs of tasks left open, sorted
	allRef []string          // every chain ref, sorted
	sample string            // an archived journal head
}

func runArchive(b *bench) error {
	n, ended := *flagArchiveTasks, *flagArchiveTasks**flagArchiveEnded/100
	if n < 2 || ended >= n || *flagArchiveBatch < 1 {
		return fmt.Errorf("archive: need -archive-tasks >= 2, -archive-ended < 100 and -archive-batch >= 1")
	}
	if *flagArchiveBatch > archive.MaxAdd {
		return fmt.Errorf("archive: -archive-batch is at most %d (archive.MaxAdd)", archive.MaxAdd)
	}
	t0 := time.Now()
	p, err := b.buildProto(n, ended)
	if err != nil {
		return err
	}
	b.printf("  %d tasks, their chains written with git fast-import in %s\n", n, time.Since(t0).Round(time.Second))
	if err := b.buildArchive(p, ended, *flagArchiveBatch); err != nil {
		return err
	}
	if err := b.checkArchiveReads(p, ended); err != nil {
		return err
	}
	if err := b.checkProtoReachable(p); err != nil {
		return err
	}
	w, err := b.newWire()
	if err != nil {
		return err
	}
	layouts := map[string][]string{"refs": p.allRef, "archive": append(append([]string{}, p.open...), archiveRef)}
	figs := map[string]*archiveFigures{}
	for _, mode := range []string{"refs", "archive"} {
		if figs[mode], err = b.protoRounds(p, w, mode, layouts[mode], n); err != nil {
			return err
		}
	}
	b.archiveReport(figs, n, ended)
	return nil
}

// buildProto writes every task's two chains (two rows each) through one git
// fast-import, then reads the heads from its marks.
func (b *bench) buildProto(n, ended int) (*protoRepo, error) {
	dir, err := b.mkrepoDir("archive-src-")
	if err != nil {
		return nil, err
	}
	if _, err := gitPlain("init", "-q", "--bare", dir); err != nil {
		return nil, err
	}
	marks := filepath.Join(dir, "marks")
	cmd := exec.Command("git", "--git-dir", dir, "fast-import", "--quiet", "--export-marks="+marks)
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(in, 1<<20)
	headMarks := writeProtoStream(bw, n)
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("git fast-import: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	byMark, err := readMarks(marks)
	if err != nil {
		return nil, err
	}
	p := &protoRepo{src: dir, heads: map[string]string{}}
	for ref, m := range headMarks {
		p.heads[ref] = byMark[m]
		p.allRef = append(p.allRef, ref)
	}
	sort.Strings(p.allRef)
	for i := ended; i < n; i++ {
		p.open = append(p.open, protoRef("journal", i), protoRef("ledger", i))
	}
	sort.Strings(p.open)
	p.sample = p.heads[protoRef("journal", 0)]
	return p, nil
}

func protoRef(kind string, i int) string { return fmt.Sprintf("refs/bernstein/%s/T-%d", kind, i) }

// writeProtoStream writes the fast-import stream. Every commit goes to one
// scratch ref with an explicit parent, so git writes no ref per chain; the
// heads are read back from the marks.
func writeProtoStream(w *bufio.Writer, n int) map[string]int {
	mark := 0
	heads := map[string]int{}
	for i := 0; i < n; i++ {
		for _, kind := range []string{"journal", "ledger"} {
			prev := 0
			for r := 0; r < 2; r++ {
				data := fmt.Sprintf("{\"row\":%d,\"chain\":\"%s/T-%d\"}\n", r, kind, i)
				mark++
				fmt.Fprintf(w, "blob\nmark :%d\ndata %d\n%s\n", mark, len(data), data)
				mark++
				msg := fmt.Sprintf("%s T-%d row %d\n", kind, i, r)
				fmt.Fprintf(w, "commit refs/bernstein-proto/scratch\nmark :%d\ncommitter b <b@example.org> 1700000000 +0000\ndata %d\n%s", mark, len(msg), msg)
				if prev != 0 {
					fmt.Fprintf(w, "from :%d\n", prev)
				} else {
					w.WriteString("from 0000000000000000000000000000000000000000\n")
				}
				fmt.Fprintf(w, "deleteall\nM 100644 :%d row.json\n\n", mark-1)
				prev = mark
			}
			heads[protoRef(kind, i)] = prev
		}
	}
	return heads
}

func readMarks(path string) (map[int]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m int
		var oid string
		if _, err := fmt.Sscanf(l, ":%d %s", &m, &oid); err != nil {
			return nil, fmt.Errorf("marks: %q: %v", l, err)
		}
		out[m] = oid
	}
	return out, nil
}

// checkProtoReachable proves the layout's premise with git itself: with the
// archived tasks' refs gone, git fsck --strict accepts the archive's gitlinks,
// and git gc --prune=now keeps every archived chain (the archive commits'
// parents hold them, not the gitlinks).
func (b *bench) checkProtoReachable(p *protoRepo) error {
	dir, err := b.protoLayout(p, "archive-gc", append(append([]string{}, p.open...), archiveRef), false)
	if err != nil {
		return err
	}
	if out, err := gitPlain("--git-dir", dir, "fsck", "--strict", "--no-progress"); err != nil {
		b.fail("archive: git fsck --strict: %v %s", err, out)
	}
	if _, err := gitPlain("--git-dir", dir, "gc", "--prune=now", "--quiet"); err != nil {
		return err
	}
	sh := sha256.Sum256([]byte("T-0"))
	got, err := gitPlain("--git-dir", dir, "rev-parse", archiveRef+":t/"+hex.EncodeToString(sh[:1])+"/T-0/journal")
	if err != nil || strings.TrimSpace(got) != p.sample {
		b.fail("archive: the gitlink of T-0's journal reads %q, want %s (%v)", strings.TrimSpace(got), p.sample, err)
	}
	if _, err := gitPlain("--git-dir", dir, "cat-file", "-e", p.sample+"~1"); err != nil {
		b.fail("archive: git gc --prune=now dropped an archived chain: %v", err)
	}
	b.printf("  git fsck --strict and git gc --prune=now on the archived layout: every archived chain kept\n")
	return nil
}

// protoLayout makes a bare repository holding refs (from p's heads, or the
// archive's head) in packed-refs. With shared, it borrows p's objects through
// an alternate; otherwise it copies the objects its refs reach.
func (b *bench) protoLayout(p *protoRepo, prefix string, refs []string, shared bool) (string, error) {
	dir, err := b.bareRepo(prefix)
	if err != nil {
		return "", err
	}
	alt := filepath.Join(dir, "objects", "info", "alternates")
	if err := os.WriteFile(alt, []byte(filepath.Join(p.src, "objects")+"\n"), 0o644); err != nil {
		return "", err
	}
	var packed strings.Builder
	packed.WriteString("# pack-refs with: peeled fully-peeled sorted \n")
	sorted := append([]string{}, refs...)
	sort.Strings(sorted)
	for _, r := range sorted {
		oid := p.heads[r]
		if r == archiveRef {
			oid = p.arch
		}
		fmt.Fprintf(&packed, "%s %s\n", oid, r)
	}
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte(packed.String()), 0o644); err != nil {
		return "", err
	}
	if !shared {
		// A copy of its own: git repack -a copies what the refs reach from the
		// alternate, and nothing else; then the alternate goes.
		if _, err := gitPlain("--git-dir", dir, "repack", "-a", "-d", "-q"); err != nil {
			return "", err
		}
		if err := os.Remove(alt); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// archiveFigures are one layout's runs.
type archiveFigures struct {
	refs                        int
	pushCPU, pushWall, fetchCPU durations
	listCPU                     durations
	pushBytes, fetchBytes       []int64
}

// protoRounds pushes one new row of an open task from a host to a remote
// holding the layout, and fetches it on another host, -rounds times; the
// wire proxy counts the bytes each way.
func (b *bench) protoRounds(p *protoRepo, w *wire, mode string, refs []string, n int) (*archiveFigures, error) {
	var dirs [3]string
	for i, role := range []string{"remote", "host", "reader"} {
		d, err := b.protoLayout(p, "archive-"+mode+"-"+role, refs, true)
		if err != nil {
			return nil, err
		}
		dirs[i] = d
	}
	remote, host, reader := dirs[0], dirs[1], dirs[2]
	for _, c := range [][]string{
		{host, "remote.origin.url", "file://" + remote}, {host, "remote.origin.receivepack", w.cmd + "receive-pack"},
		{reader, "remote.origin.url", "file://" + remote}, {reader, "remote.origin.uploadpack", w.cmd + "upload-pack"},
	} {
		if _, err := gitPlain("--git-dir", c[0], "config", c[1], c[2]); err != nil {
			return nil, err
		}
	}
	f := &archiveFigures{refs: len(refs)}
	ref := protoRef("journal", n-1)
	head := p.heads[ref]
	env := cleanEnv()
	for r := 0; r < *flagRounds; r++ {
		c, err := gitPlain("--git-dir", host, "commit-tree", head+"^{tree}", "-p", head, "-m", fmt.Sprintf("row %d of %s", r+2, mode))
		if err != nil {
			return nil, err
		}
		head = strings.TrimSpace(c)
		if _, err := gitPlain("--git-dir", host, "update-ref", ref, head); err != nil {
			return nil, err
		}
		w.take()
		push, err := b.okProc(env, "git", "--git-dir", host, "push", "-q", "origin", ref+":"+ref)
		if err != nil {
			return nil, err
		}
		f.pushCPU, f.pushWall, f.pushBytes = append(f.pushCPU, push.cpu), append(f.pushWall, push.wall), append(f.pushBytes, w.take())
		fetch, err := b.okProc(env, "git", "--git-dir", reader, "fetch", "-q", "origin", "+refs/bernstein/*:refs/bernstein/*")
		if err != nil {
			return nil, err
		}
		f.fetchCPU, f.fetchBytes = append(f.fetchCPU, fetch.cpu), append(f.fetchBytes, w.take())
		if got, err := gitPlain("--git-dir", reader, "rev-parse", ref); err != nil || strings.TrimSpace(got) != head {
			b.fail("archive: %s: the reader fetched %s at %q, want %s (%v)", mode, ref, strings.TrimSpace(got), head, err)
		}
		list, err := b.protoList(host, mode)
		if err != nil {
			return nil, err
		}
		f.listCPU = append(f.listCPU, list)
	}
	return f, nil
}

// protoList lists every task: the refs, plus the archive's entries.
func (b *bench) protoList(dir, mode string) (time.Duration, error) {
	run, err := b.okProc(cleanEnv(), "git", "--git-dir", dir, "for-each-ref", "refs/bernstein/")
	if err != nil || mode != "archive" {
		return run.cpu, err
	}
	tree, err := b.okProc(cleanEnv(), "git", "--git-dir", dir, "ls-tree", "-r", archiveRef+":t")
	return run.cpu + tree.cpu, err
}

func (b *bench) archiveReport(figs map[string]*archiveFigures, n, ended int) {
	all, arch := figs["refs"], figs["archive"]
	b.printf("\n  %d tasks, %d of them ended and archived (medians of %d rounds; CPU is git's, user+sys):\n\n", n, ended, len(all.pushCPU))
	b.printf("  | measure | every task as refs | ended tasks archived | ratio |\n  |---|---|---|---|\n")
	b.printf("  | refs advertised | %d | %d | %s |\n", all.refs, arch.refs, ratio(float64(arch.refs), float64(all.refs)))
	rows := []struct {
		name string
		a, b time.Duration
	}{
		{"push of one row (CPU)", all.pushCPU.median(), arch.pushCPU.median()},
		{"push of one row (wall)", all.pushWall.median(), arch.pushWall.median()},
		{"fetch of that row (CPU)", all.fetchCPU.median(), arch.fetchCPU.median()},
		{"list every task (CPU)", all.listCPU.median(), arch.listCPU.median()},
	}
	for _, r := range rows {
		b.printf("  | %s | %s ms | %s ms | %s |\n", r.name, msShort(r.a), msShort(r.b), dratio(r.b, r.a))
	}
	pa, pb := medianBytes(all.pushBytes), medianBytes(arch.pushBytes)
	fa, fb := medianBytes(all.fetchBytes), medianBytes(arch.fetchBytes)
	b.printf("  | push: bytes on the wire | %s | %s | %s |\n", kib(pa), kib(pb), ratioBytes(pb, pa))
	b.printf("  | fetch: bytes on the wire | %s | %s | %s |\n", kib(fa), kib(fb), ratioBytes(fb, fa))
	b.summary(fmt.Sprintf("archive prototype: push of one row, %d of %d tasks archived", ended, n), msShort(arch.pushCPU.median())+" ms", msShort(all.pushCPU.median())+" ms",
		dratio(arch.pushCPU.median(), all.pushCPU.median()), "", false)
}
