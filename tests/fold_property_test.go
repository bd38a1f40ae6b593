package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/progress"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// chainRows reads the rows of ref with plain git (git rev-list, git cat-file
// --batch), oldest first; nil when ref does not exist.
func (f *fixture) chainRows(ref string) []record.Row {
	f.t.Helper()
	list, err := f.gitErr("rev-list", "--first-parent", "--reverse", ref, "--")
	if err != nil {
		return nil
	}
	ids := strings.Fields(list)
	cmd := exec.Command("git", "-C", f.dir, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(strings.Join(ids, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		f.t.Fatalf("cat-file --batch: %v", err)
	}
	r := bufio.NewReader(bytes.NewReader(out))
	rows := make([]record.Row, 0, len(ids))
	for range ids {
		hdr, err := r.ReadString('\n')
		if err != nil {
			f.t.Fatal(err)
		}
		fs := strings.Fields(hdr)
		if len(fs) != 3 || fs[1] != "commit" {
			f.t.Fatalf("cat-file: %q", hdr)
		}
		size, _ := strconv.Atoi(fs[2])
		body := make([]byte, size+1)
		if _, err := io.ReadFull(r, body); err != nil {
			f.t.Fatal(err)
		}
		c, _, err := gitstore.ParseCommit(body[:size])
		if err != nil {
			f.t.Fatal(err)
		}
		rec, err := record.RecordFromMessage(c.Message)
		if err != nil {
			f.t.Fatal(err)
		}
		row, err := record.ParseRow(rec)
		if err != nil {
			f.t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

// workIdentity is what makes a work row new work, read from the row as
// stored: the commit of a checkpoint, the patch of a diff (every empty patch
// is the same nothing), a gate's name, command and outcome, an evidence
// producer and its outcome. Artifacts and other rows have none.
func workIdentity(t *testing.T, r record.Row) (id, producer string, passed bool) {
	t.Helper()
	switch r.Kind {
	case record.KindCheckpoint:
		var c record.Checkpoint
		r.DecodeData(&c)
		return "checkpoint " + strings.ToLower(c.Commit), "", false
	case record.KindDiffCaptured:
		var d record.DiffCaptured
		r.DecodeData(&d)
		if d.Patch.Size == 0 {
			return "diff empty", "", false
		}
		return "diff " + string(d.Patch.Hash), "", false
	case record.KindGateAttempt:
		var g record.GateAttempt
		r.DecodeData(&g)
		return fmt.Sprintf("gate %s %q %v", g.Gate, g.Command, g.Passed && g.ExitCode == 0), "", false
	case record.KindEvidenceResult:
		var e record.EvidenceResult
		r.DecodeData(&e)
		ok := e.Passed && e.ExitCode == 0
		return fmt.Sprintf("evidence %s %v", e.Producer, ok), e.Producer, ok
	}
	return "", "", false
}

// TestStoreFoldMatchesPureFold runs random scripts of work through the real
// store: checkpoints of a few commits, diffs between them (empty ones too),
// declared gates that pass, fail or flip with a flag file, ad-hoc gates and
// a declared name run with another command, evidence runs, posts, suspends
// and resumes, many of them repeats. Writes go through a long-lived store or
// a fresh one (another process); reads come from the long-lived store
// (its fold extended in memory), a fresh store (the fold cache on disk, if
// any, extended) or a fresh store after the cache was deleted, and at
// random the long-lived store is replaced. Every read gives byte for byte
// the vector progress.FoldProgress folds from the rows as plain git reads
// them, and a step whose rows all repeat earlier work with the same outcome
// (for evidence: the same outcome as the producer's latest) moves no field
// but gate_attempts and never raises earned_steps.
func TestStoreFoldMatchesPureFold(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			t.Parallel()
			storeFoldScript(t, seed, 90)
		})
	}
}

func storeFoldScript(t *testing.T, seed int64, steps int) {
	rnd := rand.New(rand.NewSource(seed))
	f := newFixture(t)
	var commits []string
	for i := 0; i < 4; i++ {
		if err := os.WriteFile(filepath.Join(f.dir, "work.txt"), []byte(fmt.Sprintf("version %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		f.git("add", "work.txt")
		f.git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", fmt.Sprint("commit ", i))
		commits = append(commits, strings.TrimSpace(f.git("rev-parse", "HEAD")))
	}
	flag := filepath.Join(t.TempDir(), "flag")
	const task = "G-1"
	fresh := func() *bernstein.Store {
		st, err := bernstein.Open(f.opts)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	s := fresh()
	if _, err := s.CreateTask(bernstein.TaskSpec{ID: task,
		Gates:    []ledger.Gate{{Name: "ok", Command: "true"}, {Name: "bad", Command: "false"}, {Name: "flip", Command: "test -f " + flag}},
		Evidence: []ledger.Producer{{Name: "sure", Command: "true", Required: true}, {Name: "flaky", Command: "test -f " + flag, Required: true}},
	}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.Claim(task, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(task, record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	suspended := false
	cacheDir := filepath.Join(f.dir, ".git", "bernstein", "cache")
	cacheFile := filepath.Join(cacheDir, "journal", refs.EscapeTask(task)+".json")

	pure := func() (progress.Vector, []record.Row) {
		t.Helper()
		j := f.chainRows(refs.Journal(task))
		v, err := progress.FoldProgress(task, j, f.chainRows(refs.Ledger(task)))
		if err != nil {
			t.Fatal(err)
		}
		return v, j
	}
	var reads, cachedReads, cacheWrites, repeats int
	check := func(step int, how string, st *bernstein.Store) {
		t.Helper()
		reads++
		want, rows := pure()
		got, err := st.Progress(task)
		if err != nil {
			t.Fatalf("step %d, %s: %v", step, how, err)
		}
		if !bytes.Equal(got.Vector.Bytes(), want.Bytes()) || got.VectorHash != want.Hash() || got.EarnedSteps != want.EarnedSteps() {
			t.Fatalf("step %d, %s: the store folds\n%s\nthe rows fold\n%s", step, how, got.Vector.Bytes(), want.Bytes())
		}
		if got.JournalRows != int64(len(rows)) || got.Proof.State != "verified" || len(got.Proof.RowsAtFault) != 0 {
			t.Fatalf("step %d, %s: %d journal rows (git has %d), proof %+v", step, how, got.JournalRows, len(rows), got.Proof)
		}
		if h, err := st.TaskHandle(task); err != nil || h.ProgressHash != want.Hash() {
			t.Fatalf("step %d, %s: handle %+v %v", step, how, h, err)
		}
	}

	for step := 0; step < steps; step++ {
		w, closeW := s, func() {}
		if rnd.Intn(5) == 0 {
			w = fresh()
			closeW = func() { w.Close() }
		}
		before, rowsBefore := pure()
		var err error
		work := true
		switch k := rnd.Intn(11); k {
		case 0, 1:
			_, err = w.Checkpoint(task, commits[rnd.Intn(len(commits))], "")
		case 2, 3:
			_, err = w.CaptureDiff(task, commits[rnd.Intn(len(commits))], commits[rnd.Intn(len(commits))], "")
		case 4, 5:
			_, err = w.RunGate(task, []string{"ok", "bad", "flip"}[rnd.Intn(3)], nil, bernstein.RunOptions{})
		case 6:
			if rnd.Intn(2) == 0 {
				_, err = w.RunGate(task, "adhoc", []string{"true"}, bernstein.RunOptions{})
			} else {
				_, err = w.RunGate(task, "bad", []string{"sh", "-c", "true"}, bernstein.RunOptions{})
			}
		case 7:
			var names []string
			if rnd.Intn(2) == 0 {
				names = []string{[]string{"sure", "flaky"}[rnd.Intn(2)]}
			}
			_, err = w.RunEvidence(task, names, bernstein.RunOptions{})
		case 8:
			work = false
			if _, e := os.Stat(flag); e == nil {
				err = os.Remove(flag)
			} else {
				err = os.WriteFile(flag, nil, 0o644)
			}
		case 9:
			work = false
			_, err = w.Post(bernstein.PostRequest{Task: task, Key: fmt.Sprint("k", rnd.Intn(2)), Agent: "agent", ClaimToken: tok, Payload: report(fmt.Sprint("step ", step))})
		case 10:
			work = false
			kind := record.KindTaskSuspended
			if suspended {
				kind = record.KindTaskResumed
			}
			if _, err = w.Transition(task, kind, "", ""); err == nil {
				suspended = !suspended
			}
		}
		closeW()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}

		// Repeated work earns nothing and moves nothing but gate_attempts.
		after, rowsAfter := pure()
		if work && len(rowsAfter) > len(rowsBefore) {
			seen := map[string]bool{}
			latest := map[string]bool{}
			for _, r := range rowsBefore {
				id, producer, ok := workIdentity(t, r)
				seen[id] = true
				if producer != "" {
					latest[producer] = ok
				}
			}
			repeat := true
			for _, r := range rowsAfter[len(rowsBefore):] {
				id, producer, ok := workIdentity(t, r)
				if prev, had := latest[producer]; id == "" || !seen[id] || producer != "" && (!had || prev != ok) {
					repeat = false
				}
			}
			if repeat {
				repeats++
				b, a := before, after
				b.GateAttempts, a.GateAttempts = 0, 0
				if a.EarnedSteps() > b.EarnedSteps() || !bytes.Equal(a.Bytes(), b.Bytes()) {
					t.Fatalf("step %d repeated work and moved the vector:\n%s\n%s", step, before.Bytes(), after.Bytes())
				}
			}
		}

		switch rnd.Intn(6) {
		case 0:
			check(step, "the long-lived store", s)
		case 1:
			_, statErr := os.Stat(cacheFile)
			st := fresh()
			check(step, "a fresh store", st)
			st.Close()
			if statErr == nil {
				cachedReads++
			}
		case 2:
			if err := os.RemoveAll(cacheDir); err != nil {
				t.Fatal(err)
			}
			st := fresh()
			check(step, "a fresh store without a cache", st)
			st.Close()
			if _, err := os.Stat(cacheFile); err == nil {
				cacheWrites++
			} else if n := len(rowsAfter); n >= 32 {
				t.Fatalf("step %d: a cold fold of %d rows wrote no cache", step, n)
			}
		case 3:
			s.Close()
			s = fresh()
			check(step, "a new long-lived store", s)
		}
	}
	check(steps, "the long-lived store at the end", s)
	st := fresh()
	check(steps, "a fresh store at the end", st)
	st.Close()
	s.Close()
	t.Logf("seed %d: %d reads, %d with a cache file, %d cache writes, %d repeats", seed, reads, cachedReads, cacheWrites, repeats)
	if repeats < 10 || cachedReads < 3 || cacheWrites < 1 {
		t.Fatalf("the script exercised too little: %d repeats, %d reads with a cache, %d cache writes", repeats, cachedReads, cacheWrites)
	}
}
