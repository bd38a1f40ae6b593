package verify

import (
	"fmt"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Every journal and ledger row is recorded by a writer that signs the row's
// commit with its SSH key (as spine and audit commits are signed, so `git
// verify-commit` checks them too) and names itself as the committer. A row
// grants something (a claim, a transition, a step of progress) only when
// that signature is proven; a row written with plain git grants nothing.

// RowFault is a row that does not count (record.RowFault).
type RowFault = record.RowFault

// ProveCommit decides a row commit's proof: the writer its committer names
// and whether that writer signed it with a trusted key (Verified), with the
// key its writers ref publishes while nothing pins it
// (Unverifiable), or not at all (Tampered).
func ProveCommit(env *Env, c gitstore.Commit, payload []byte) chain.Proof {
	writer, ok := CommitWriter(c.Committer)
	if !ok {
		return chain.Proof{State: Tampered, Reason: "the commit names no writer as its committer"}
	}
	st, reason := checkSignature(env, writer, payload, c.Signature, CommitTime(c.Committer))
	return proofOf(writer, st, reason)
}

// ProveCommitID is ProveCommit of the commit id, whose proof env keeps
// for the next reads of the same commit: a commit's proof depends on its
// bytes, which its id names, and on env's keys and trust set, which do not
// change. The reads of one view prove a task's commits one after another
// (its feed, then its fold; its fold, then its artifacts), so env keeps
// the proofs of the last provenKept commits it proved, not every one.
func ProveCommitID(env *Env, id gitstore.Oid, c gitstore.Commit, payload []byte) chain.Proof {
	if p, ok := env.proven().get(id); ok {
		return p
	}
	p := ProveCommit(env, c, payload)
	env.proven().put(id, p)
	return p
}

// provenKept is how many commits' proofs an Env keeps.
const provenKept = 256

// provenMemo is the proofs of the last commits an Env proved, by id.
type provenMemo struct {
	mu   sync.Mutex
	ids  [provenKept]gitstore.Oid // a ring, in the order proved
	next int
	by   map[gitstore.Oid]chain.Proof
}

func (env *Env) proven() *provenMemo {
	env.provenOnce.Do(func() { env.provenMemo = &provenMemo{by: make(map[gitstore.Oid]chain.Proof, provenKept)} })
	return env.provenMemo
}

func (m *provenMemo) get(id gitstore.Oid) (chain.Proof, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.by[id]
	return p, ok
}

func (m *provenMemo) put(id gitstore.Oid, p chain.Proof) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.by[id]; ok {
		return
	}
	if old := m.ids[m.next]; !old.IsZero() {
		delete(m.by, old)
	}
	m.ids[m.next], m.by[id] = id, p
	m.next = (m.next + 1) % provenKept
}

func proofOf(writer string, st sigState, reason string) chain.Proof {
	switch st {
	case sigTrusted:
		return chain.Proof{Writer: writer, State: Verified}
	case sigUnpinned, sigNoKey:
		return chain.Proof{Writer: writer, State: Unverifiable, Reason: reason}
	}
	return chain.Proof{Writer: writer, State: Tampered, Reason: reason}
}

// proveCommits is ProveCommit for every readable commit of a chain (a
// commit with Err gets no proof), with the signatures checked in batches.
func proveCommits(env *Env, commits []chain.Commit) []chain.Proof {
	proofs := make([]chain.Proof, len(commits))
	jobs := make([]sigJob, 0, len(commits))
	at := make([]int, 0, len(commits))
	for i, cc := range commits {
		if cc.Err != nil {
			continue
		}
		if p, ok := env.proven().get(cc.ID); ok {
			proofs[i] = p // proven by a read of the same view
			continue
		}
		writer, ok := CommitWriter(cc.Commit.Committer)
		if !ok {
			proofs[i] = chain.Proof{State: Tampered, Reason: "the commit names no writer as its committer"}
			continue
		}
		jobs = append(jobs, sigJob{writer: writer, payload: cc.Payload, armored: cc.Commit.Signature, when: CommitTime(cc.Commit.Committer)})
		at = append(at, i)
	}
	checkSignatures(env, jobs)
	for n, i := range at {
		proofs[i] = proofOf(jobs[n].writer, jobs[n].state, jobs[n].reason)
		env.proven().put(commits[i].ID, proofs[i])
	}
	return proofs
}

// CommitWriter returns the writer id a commit's committer line names
// ("<writer> <writer@bernstein> <time> <zone>"): its name. The signature,
// checked against that writer's keys, is what makes the name mean anything.
func CommitWriter(committer string) (string, bool) {
	name, _, ok := strings.Cut(committer, " <")
	if !ok || refs.ValidateWriter(name) != nil {
		return "", false
	}
	return name, true
}

// Anchored reports whether the reader trusts any key (its own writer's or a
// pinned one). Only an anchored reader can prove a row; one without any
// anchor (a fresh clone before pinning) counts the rows that check against
// their published keys and marks the result unverifiable.
func (env *Env) Anchored() bool { return env.Trust != nil && env.Trust.Anchored() }

// RowCounts reports whether a row with proof state counts for a reader: a
// verified row always, an unverifiable one only for a reader with no trust
// anchor at all (whose every answer is then unverifiable), a tampered one
// never.
func RowCounts(state string, anchored bool) bool {
	return state == Verified || state == Unverifiable && !anchored
}

// FaultFrom is the fault of a row that follows the first row that did not
// count, at index first.
func FaultFrom(chainName string, index, first int64, p chain.Proof) RowFault {
	st := p.State
	if st == Verified {
		st = Tampered
	}
	return RowFault{Chain: chainName, Index: index, Writer: p.Writer, State: st,
		Reason: fmt.Sprintf("follows the unproven row at %s index %d", chainName, first)}
}

// Fault is the fault of a row that does not count by its own proof.
func Fault(chainName string, index int64, p chain.Proof, anchored bool) RowFault {
	reason := p.Reason
	if p.State == Unverifiable && anchored && reason != noKeyReason(p.Writer) {
		reason = fmt.Sprintf("signed by writer %s, whose key is published but not pinned here", p.Writer)
	}
	return RowFault{Chain: chainName, Index: index, Writer: p.Writer, State: p.State, Reason: reason}
}

// ProofState sums up a fold: tampered when any row is tampered, else
// unverifiable when any row (counted or not) is unverifiable, else verified.
func ProofState(faults []RowFault, unverifiableCounted bool) string {
	st := Verified
	if unverifiableCounted {
		st = Unverifiable
	}
	for _, f := range faults {
		switch f.State {
		case Tampered:
			return Tampered
		case Unverifiable:
			st = Unverifiable
		}
	}
	return st
}
