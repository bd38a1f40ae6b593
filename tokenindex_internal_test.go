package bernstein

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// openIndexRepo makes a repository with n claimed tasks and returns two
// stores on it (another process's writes are another store's) and the
// tokens by task.
func openIndexRepo(t testing.TB, n int) (*Store, *Store, map[string]string) {
	t.Helper()
	a, opts := newTestStore(t)
	b, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tokens := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			id := fmt.Sprintf("T-%04d", i)
			if _, err := b.CreateTask(TaskSpec{ID: id, Title: id}); err != nil {
				errs <- err
				return
			}
			tok, err := b.Claim(id, fmt.Sprintf("agent-%d", i))
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			tokens[id] = tok
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return a, b, tokens
}

func (ix *tokenIndex) counts() (folds, confirms, listings int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.folds, ix.confirms, ix.listings
}

// TestTokenIndexGarbageIsO1 checks that, with 100 claimed tasks, a token no
// claim has costs no ledger fold, no confirmation and no listing of the
// heads while no ledger moves. Its cost against a fold of every ledger, at
// 1,000 tasks, is `make bench`'s (growth).
func TestTokenIndexGarbageIsO1(t *testing.T) {
	a, _, tokens := openIndexRepo(t, 100)
	// The first lookup builds the index: one fold per ledger.
	if c, err := a.ClaimByToken(tokens["T-0050"]); err != nil || c.Task != "T-0050" || c.Agent != "agent-50" {
		t.Fatalf("T-0050: %+v %v", c, err)
	}
	folds, _, _ := a.tokens.counts()
	if folds != 100 {
		t.Errorf("building the index folded %d ledgers, want 100", folds)
	}
	// The signal settled (a listing within the racy window of the last
	// write is not trusted), count.
	waitClean(t, a)
	folds0, confirms0, listings0 := a.tokens.counts()
	for i := range 10000 {
		if _, err := a.ClaimByToken(fmt.Sprintf("bct_garbage-%d", i)); err == nil {
			t.Fatal("a garbage token resolved")
		}
	}
	folds1, confirms1, listings1 := a.tokens.counts()
	if folds1 != folds0 || confirms1 != confirms0 || listings1 != listings0 {
		t.Errorf("10,000 garbage tokens cost %d folds, %d confirmations, %d listings (want none)",
			folds1-folds0, confirms1-confirms0, listings1-listings0)
	}
	// A real token: one confirmation, no fold of another ledger.
	for id, tok := range map[string]string{"T-0000": tokens["T-0000"], "T-0099": tokens["T-0099"]} {
		if c, err := a.ClaimByToken(tok); err != nil || c.Task != id {
			t.Errorf("%s: %+v %v", id, c, err)
		}
	}
	folds2, confirms2, _ := a.tokens.counts()
	if folds2 != folds1 || confirms2 != confirms1+2 {
		t.Errorf("two real tokens: %d index folds, %d confirmations", folds2-folds1, confirms2-confirms1)
	}
}

// waitClean dates the signal's files back (as if the refs had been quiet
// for a minute) and looks a garbage token up: the index then trusts its
// signal.
func waitClean(t *testing.T, s *Store) {
	t.Helper()
	settleSignal(t, s.gitDir)
	s.ClaimByToken("bct_settle")
	s.tokens.mu.Lock()
	clean := s.tokens.clean
	s.tokens.mu.Unlock()
	if !clean {
		t.Fatal("the index does not trust a signal quiet for a minute")
	}
}

// settleSignal sets the modification times of the paths whose stat is the
// token index's signal (refsSignal) a minute back.
func settleSignal(t *testing.T, gitDir string) {
	t.Helper()
	old := time.Now().Add(-time.Minute)
	for _, p := range []string{"packed-refs", "refs/bernstein/ledger", "refs/bernstein", "refs/bernstein/writers"} {
		if err := os.Chtimes(filepath.Join(gitDir, filepath.FromSlash(p)), old, old); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// TestTokenIndexFollowsOtherWriters checks that a claim, release, reclaim or
// completion by another store (as by another process) is seen by the very
// next lookup, however soon after the write it comes.
func TestTokenIndexFollowsOtherWriters(t *testing.T) {
	a, b, tokens := openIndexRepo(t, 20)
	if _, err := a.ClaimByToken(tokens["T-0001"]); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		id := fmt.Sprintf("N-%d", i)
		if _, err := b.CreateTask(TaskSpec{ID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		tok, err := b.Claim(id, "late")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := a.ClaimByToken(tok); err != nil || c.Task != id || c.Agent != "late" {
			t.Fatalf("claim %s seen at once: %+v %v", id, c, err)
		}
		if _, err := b.Transition(id, record.KindTaskReleased, "", ""); err != nil {
			t.Fatal(err)
		}
		if c, err := a.ClaimByToken(tok); err == nil {
			t.Fatalf("released claim %s still resolves: %+v", id, c)
		}
		tok2, err := b.Claim(id, "again")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.ClaimByToken(tok); err == nil {
			t.Fatalf("the first token of %s resolves after a reclaim", id)
		}
		if c, err := a.ClaimByToken(tok2); err != nil || c.Agent != "again" {
			t.Fatalf("reclaim of %s: %+v %v", id, c, err)
		}
	}
	// Completed: the token stops.
	if _, err := b.Transition("T-0002", record.KindTaskStarted, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Transition("T-0002", record.KindTaskCompleted, "", ""); err != nil {
		t.Fatal(err)
	}
	if c, err := a.ClaimByToken(tokens["T-0002"]); err == nil {
		t.Errorf("the token of a completed task resolves: %+v", c)
	}
	if _, err := a.ClaimByToken(""); err == nil {
		t.Error("an empty token resolved")
	}
}

// TestTokenIndexPoisonedChangesNothing poisons the index: an entry naming a
// task for a token it does not have grants nothing, and a real token filed
// under the wrong task still resolves to its own.
func TestTokenIndexPoisonedChangesNothing(t *testing.T) {
	a, _, tokens := openIndexRepo(t, 5)
	if _, err := a.ClaimByToken(tokens["T-0001"]); err != nil {
		t.Fatal(err)
	}
	ix := &a.tokens
	garbage := TokenHash("bct_forged")
	ix.mu.Lock()
	ix.byHash[garbage] = []string{"T-0001"}
	ix.byTask["T-0001"] = garbage
	// The real token of T-0003 filed under T-0004.
	real3 := TokenHash(tokens["T-0003"])
	ix.byHash[real3] = []string{"T-0004"}
	ix.mu.Unlock()

	if c, err := a.ClaimByToken("bct_forged"); err == nil {
		t.Errorf("a poisoned entry granted %+v", c)
	}
	if c, err := a.ClaimByToken(tokens["T-0003"]); err != nil || c.Task != "T-0003" || c.Agent != "agent-3" {
		t.Errorf("a misfiled token: %+v %v", c, err)
	}
	// The rebuild put every entry right.
	for id, tok := range tokens {
		if c, err := a.ClaimByToken(tok); err != nil || c.Task != id {
			t.Errorf("%s after the rebuild: %+v %v", id, c, err)
		}
	}
	if c, err := a.ClaimByToken("bct_forged"); err == nil {
		t.Errorf("the forged token resolves after the rebuild: %+v", c)
	}
}

// TestTokenIndexStaleEntryGrantsNothing: an index that missed a change (a
// release and a reclaim by another process that its signal did not show)
// still files the first agent's token under the task. That token must not
// resolve, neither to the first agent nor to the new holder of the claim:
// the proven ledger's claim has another token hash. The new token resolves.
func TestTokenIndexStaleEntryGrantsNothing(t *testing.T) {
	a, b, tokens := openIndexRepo(t, 3)
	const task = "T-0001"
	old := tokens[task]
	if c, err := a.ClaimByToken(old); err != nil || c.Agent != "agent-1" {
		t.Fatalf("before: %+v %v", c, err)
	}
	if _, err := b.Transition(task, record.KindTaskReleased, "", ""); err != nil {
		t.Fatal(err)
	}
	fresh, err := b.Claim(task, "agent-new")
	if err != nil {
		t.Fatal(err)
	}
	// The index believes it folded the ledger as it is now, with the old
	// claim in it, and its signal says nothing moved since.
	head, err := a.refs.Read(refs.Ledger(task))
	if err != nil {
		t.Fatal(err)
	}
	ix := &a.tokens
	ix.mu.Lock()
	if ix.byTask[task] != TokenHash(old) {
		ix.mu.Unlock()
		t.Fatalf("the index does not hold the old claim")
	}
	ix.heads[task] = head
	ix.sig, ix.clean = a.refsSignal(), true
	ix.mu.Unlock()

	if c, err := a.ClaimByToken(old); err == nil {
		t.Fatalf("the released claim's token resolved through a stale index: %+v", c)
	}
	if c, err := a.ClaimByToken(fresh); err != nil || c.Task != task || c.Agent != "agent-new" {
		t.Fatalf("the new claim's token: %+v %v", c, err)
	}
	if c, err := a.ClaimByToken(old); err == nil {
		t.Fatalf("the released claim's token resolved after the rebuild: %+v", c)
	}
}
