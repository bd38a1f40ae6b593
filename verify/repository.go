package verify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// A signature proves who wrote a row, not where it belongs. Every chain of
// a repository in storage format 2 is rooted in the repository's identity:
// the prev of its first record is the chain's genesis hash
// (record.Genesis), and every later record is bound to it through the prev
// links. A chain whose first record is rooted anywhere else is foreign: a
// task, spine or audit mirror copied from another repository (even one the
// same writer serves), whose rows count for nothing here.
//
// A repository upgraded from format 1 keeps its older chains, rooted in
// "": the upgrade lists each of them (its first commit) in the tree of the
// repository chain, and only those count as bound. A format-1 chain copied
// in later is not listed, and is foreign too.

// Binding is the repository identity the rows of a read are bound to.
type Binding struct {
	ID     string       // "" for a repository without an identity (format 1)
	Format int          // storage format
	Head   gitstore.Oid // refs/bernstein/repository ("" when there is none)
	// Problem is why refs/bernstein/repository cannot be taken as this
	// repository's identity (a record that does not parse or chain); every
	// chain's root is then at fault with it.
	Problem string
	// Signature is why a commit of the repository chain is tampered (not
	// signed by a key trusted or published for the writer it names), ""
	// when none is. audit verify reports it; it binds nothing by itself:
	// the id is what chains are rooted in, and a copy of a repository's
	// signed identity is that repository.
	Signature string
	// Ref is why refs/bernstein/repository itself is tampered (garbled,
	// pointed elsewhere, deleted, or naming another identity) while this
	// binding is the identity this host's writer recorded for the
	// repository, which the repository still holds (docs/trust.md): the
	// chains are bound to it, and audit verify reports the ref. RefAt is
	// the ref's value ("" when it is deleted).
	Ref   string
	RefAt gitstore.Oid

	objs   *gitstore.Repo
	tree   gitstore.Oid // the head commit's tree: the bound format-1 chains
	mu     sync.Mutex
	shards map[string]map[string]gitstore.Oid // "<chain>/<xx>" -> component -> first commit
}

// LegacyRoot is where the repository chain's tree lists a format-1 chain
// bound by the upgrade: legacy/<chain>/<2 hex digits>/<name>, the digits
// the first byte of the sha256 of the name (so that no one tree grows with
// the repository), the name a task's escaped id or a writer. The blob holds
// the chain's first commit id and a newline.
func LegacyRoot(kind, name string) string {
	comp := name
	if kind == record.ChainJournal || kind == record.ChainLedger {
		comp = refs.EscapeTask(name)
	}
	sum := sha256.Sum256([]byte(comp))
	return "legacy/" + kind + "/" + hex.EncodeToString(sum[:1]) + "/" + comp
}

// LoadBinding reads the repository chain whose head is head (zero: the
// repository has none, and is in format 1) under env's keys. Its records
// must chain (seq, prev) and carry one id and a format that never
// decreases; a commit not signed by its writer's key (trusted or
// published) is reported (Signature), for an identity nobody signed is
// tampered with, though it grants nothing by itself.
func LoadBinding(env *Env, head gitstore.Oid) *Binding {
	r := &Binding{Format: record.FormatLegacy, Head: head, objs: env.Objects, shards: map[string]map[string]gitstore.Oid{}}
	if head.IsZero() {
		return r
	}
	r.Format = 0
	var recs []record.RepositoryRecord
	var tip chain.Commit
	problem := ""
	chain.Walk(env.Objects, head, func(cc chain.Commit) bool {
		if len(recs) == 0 {
			tip = cc
		}
		if cc.Err != nil {
			problem = cc.Err.Error()
			return false
		}
		rec, err := record.ParseRepositoryRecord(cc.Record)
		if err != nil {
			problem = fmt.Sprintf("commit %s: %v", cc.ID, err)
			return false
		}
		if p := ProveCommit(env, cc.Commit, cc.Payload); p.State == Tampered {
			if r.Signature == "" {
				r.Signature = fmt.Sprintf("%s: commit %s (seq %d): %s", refs.Repository, cc.ID, rec.Seq, p.Reason)
			}
		} else if p.Writer != rec.Writer {
			problem = fmt.Sprintf("commit %s (seq %d) is committed by %s, not by its record's writer %s", cc.ID, rec.Seq, p.Writer, rec.Writer)
			return false
		}
		if n := len(recs); n > 0 {
			newer := recs[n-1]
			switch {
			case newer.Seq != rec.Seq+1:
				problem = fmt.Sprintf("seq %d follows seq %d", newer.Seq, rec.Seq)
			case newer.Prev != record.Sum(cc.Record):
				problem = fmt.Sprintf("the record at seq %d does not link to the one before it", newer.Seq)
			case newer.ID != rec.ID:
				problem = fmt.Sprintf("the record at seq %d names another repository id", newer.Seq)
			case newer.Format < rec.Format:
				problem = fmt.Sprintf("the record at seq %d lowers the format from %d to %d", newer.Seq, rec.Format, newer.Format)
			}
			if problem != "" {
				return false
			}
		}
		if len(cc.Commit.Parents) == 0 && (rec.Seq != 0 || rec.Prev != "") {
			problem = "its first record does not have seq 0 and an empty prev"
			return false
		}
		recs = append(recs, rec)
		return true
	})
	if problem == "" && len(recs) > 0 && recs[len(recs)-1].Seq != 0 {
		problem = "its first record is missing"
	}
	if problem != "" {
		r.Problem = fmt.Sprintf("%s: %s", refs.Repository, problem)
		return r
	}
	r.ID, r.Format, r.tree = recs[0].ID, recs[0].Format, tip.Commit.Tree
	return r
}

// Recorded is the binding of the identity id this host's writer recorded
// at the repository chain's head, once loaded (LoadBinding at head), when
// refs/bernstein/repository read as ref does not name it: at, the ref's
// value, and ref, its own binding. It returns ref when the recorded
// identity does not load whole as id (a repository created again at the
// same path holds no such record).
func Recorded(env *Env, ref *Binding, at gitstore.Oid, id string, head gitstore.Oid) *Binding {
	if ref.Problem == "" && ref.ID == id {
		return ref
	}
	b := LoadBinding(env, head)
	if b.Problem != "" || b.ID != id {
		return ref
	}
	why := ""
	switch {
	case at.IsZero():
		why = "it is deleted"
	case ref.Problem != "":
		why = strings.TrimPrefix(ref.Problem, refs.Repository+": ")
	case ref.ID == "":
		why = "it names no repository identity"
	default:
		why = fmt.Sprintf("it names repository %s", ref.ID)
	}
	b.Ref = fmt.Sprintf("%s (at %s) does not name this repository's identity %s, which this host's writer recorded at %s: %s", refs.Repository, at, id, head, why) + RepositoryRefRepair
	b.RefAt = at
	return b
}

// NewBinding is the binding of a repository whose identity a writer has
// just minted: id, in format, with no bound format-1 chain.
func NewBinding(id string, format int) *Binding {
	return &Binding{ID: id, Format: format, shards: map[string]map[string]gitstore.Oid{}}
}

// Genesis is the prev the first record of the chain of kind (journal,
// ledger, spine, audit) named name takes when it is written here.
func (r *Binding) Genesis(kind, name string) string {
	if r == nil {
		return ""
	}
	return record.GenesisLink(r.ID, kind, name)
}

// CheckRepositoryBinding is the check (audit verify, the guard) of a chain
// that is not rooted in this repository.
const CheckRepositoryBinding = "repository_binding"

// CheckRepositoryIdentity is the check of refs/bernstein/repository itself.
const CheckRepositoryIdentity = "repository_identity"

// CheckTaskOwner is the check of a row by a writer trusted only on first
// use on a task another writer created.
const CheckTaskOwner = "task_owner"

// ForeignWord begins the reason of a chain rooted in another repository.
const ForeignWord = "foreign:"

// IsForeign reports whether f is the fault of a chain rooted elsewhere.
func IsForeign(f RowFault) bool { return strings.HasPrefix(f.Reason, ForeignWord) }

// CheckRoot checks the first record of the chain of kind named name, whose
// commit is root and whose prev is prev: "" when it is rooted in this
// repository, else why it is foreign.
func (r *Binding) CheckRoot(kind, name string, root gitstore.Oid, prev string) string {
	if r == nil {
		if prev == "" {
			return ""
		}
		r = &Binding{}
	}
	switch {
	case r.Problem != "":
		return fmt.Sprintf("%s this repository's identity cannot be read (%s), so no chain can be bound to it", ForeignWord, r.Problem)
	case r.ID == "" && prev == "":
		return ""
	case r.ID == "":
		return fmt.Sprintf("%s its first record is rooted in a repository identity, and this repository has none (no %s): the %s was made in another repository", ForeignWord, refs.Repository, what(kind, name))
	case prev == r.Genesis(kind, name):
		return ""
	case prev == "":
		if first, ok := r.legacy(kind, name); ok && first == root {
			return ""
		}
		return fmt.Sprintf("%s its first record is rooted in no repository (storage format 1), and it is not among the format-1 chains this repository bound when it was upgraded: the %s was copied here from another repository, or made later by a version that writes format 1", ForeignWord, what(kind, name))
	}
	return fmt.Sprintf("%s its first record is rooted in another repository (its prev is not this repository's genesis hash for the %s): the %s was copied here from another repository", ForeignWord, what(kind, name), what(kind, name))
}

func what(kind, name string) string {
	switch kind {
	case record.ChainJournal, record.ChainLedger:
		return fmt.Sprintf("%s of task %s", kind, name)
	}
	return fmt.Sprintf("%s of writer %s", kind, name)
}

// legacy returns the first commit the upgrade bound for a format-1 chain.
func (r *Binding) legacy(kind, name string) (gitstore.Oid, bool) {
	if r.tree.IsZero() || r.objs == nil {
		return gitstore.ZeroOid, false
	}
	path := LegacyRoot(kind, name)
	dir, comp := path[:strings.LastIndexByte(path, '/')], path[strings.LastIndexByte(path, '/')+1:]
	r.mu.Lock()
	defer r.mu.Unlock()
	shard, ok := r.shards[dir]
	if !ok {
		shard = map[string]gitstore.Oid{}
		if id, ok := treePath(r.objs, r.tree, dir); ok {
			if es, err := readTree(r.objs, id); err == nil {
				for _, e := range es {
					if b, err := r.objs.ReadType(e.ID, gitstore.TypeBlob); err == nil {
						if o, err := gitstore.ParseOid(strings.TrimSuffix(string(b), "\n")); err == nil && len(b) == 41 {
							shard[e.Name] = o
						}
					}
				}
			}
		}
		r.shards[dir] = shard
	}
	o, ok := shard[comp]
	return o, ok
}

// treePath follows a slash-separated path of trees from tree.
func treePath(objs *gitstore.Repo, tree gitstore.Oid, path string) (gitstore.Oid, bool) {
	id := tree
	for _, part := range strings.Split(path, "/") {
		es, err := readTree(objs, id)
		if err != nil {
			return gitstore.ZeroOid, false
		}
		found := false
		for _, e := range es {
			if e.Name == part && e.Mode == gitstore.ModeTree {
				id, found = e.ID, true
				break
			}
		}
		if !found {
			return gitstore.ZeroOid, false
		}
	}
	return id, true
}

// RepositoryRefRepair ends Binding.Ref: what reads and writes do about the
// ref until it is moved back.
const RepositoryRefRepair = "; every chain is read against the recorded identity, and the next write (or 'bernstein init') moves the ref back"
