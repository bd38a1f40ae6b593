// Package taskops is what each write of a task puts in a transaction: the
// ledger rows of its lifecycle (created, claimed, the transitions, and the
// journal's seal in the spine at a terminal one), artifact posts (the claim
// check, the spine entry, the journal row and its audit mirror), and the
// rows of work (checkpoints, diffs, gate and evidence runs). The caller
// (the root package) has checked the input; an operation refuses only what
// the chains say.
package taskops

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/bernstein/bernstein/internal/txn"
	"github.com/bernstein/bernstein/ledger"
	"github.com/bernstein/bernstein/record"
)

// Create starts task's ledger with task.created; ledger.ErrTaskExists when
// it has one.
func Create(t *txn.Tx, task, actor string, created ledger.Created) error {
	c, err := t.LedgerChain(task)
	if err != nil {
		return err
	}
	if c.Ledger != nil {
		return fmt.Errorf("task %s %w", task, ledger.ErrTaskExists)
	}
	_, _, err = t.AppendLedger(task, record.KindTaskCreated, actor, created)
	return err
}

// NewClaim makes a claim for agent: a random claim token, shown once, and
// the claim row's data, which keeps only the token's hash.
func NewClaim(agent string) (token string, claimed ledger.Claimed, err error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", ledger.Claimed{}, err
	}
	token = "bct_" + base64.RawURLEncoding.EncodeToString(raw[:])
	var cid [8]byte
	rand.Read(cid[:])
	return token, ledger.Claimed{Agent: agent, ClaimID: "claim-" + hex.EncodeToString(cid[:]), TokenSHA256: ledger.TokenHash(token)}, nil
}

// Claim gives agent the task's claim (its token's hash and id in claimed).
func Claim(t *txn.Tx, task, agent string, claimed ledger.Claimed) error {
	_, _, err := t.AppendLedger(task, record.KindTaskClaimed, agent, claimed)
	return err
}

// Transition applies a transition that carries only a reason; a terminal
// one also seals the task's journal in the spine.
func Transition(t *txn.Tx, task, kind, actor, reason string) error {
	row, _, err := t.AppendLedger(task, kind, actor, ledger.Transition{Reason: reason})
	if err != nil {
		return err
	}
	if ledger.Terminal(ledger.PhaseOf(kind)) {
		return sealJournal(t, task, row)
	}
	return nil
}

// sealJournal records the journal's head and row count in a signed spine
// entry, with a detached signature over the entry in the spine commit.
func sealJournal(t *txn.Tx, task string, transition record.Row) error {
	rows, head, err := t.NextJournalRow(task)
	if err != nil {
		return err
	}
	hdr, err := t.SpineHeader(record.SpineJournalSeal)
	if err != nil {
		return err
	}
	seal := record.SpineSealEntry{SpineHeader: hdr, TaskID: task, Head: head, Rows: rows, LedgerIndex: transition.Index, Transition: transition.Kind}
	b, err := record.Canonical(seal)
	if err != nil {
		return err
	}
	sig, err := t.Identity().SignDetached(b)
	if err != nil {
		return err
	}
	files := map[string][]byte{record.SealSignatureFile: []byte(base64.StdEncoding.EncodeToString(sig) + "\n")}
	_, err = t.AppendSpine(seal, fmt.Sprintf("journal_seal %s (%d rows)", task, rows), files)
	return err
}
