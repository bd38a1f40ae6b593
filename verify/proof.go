package verify

import (
	"fmt"
	"strings"

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
