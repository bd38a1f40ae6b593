// Package verify is bernstein's one definition of "verified": the checks
// every surface applies to an artifact version before it shows content, the
// journal-identity rule for seals, and the whole-repository walker behind
// `bernstein audit verify`. It reads through the object store and never
// trusts it: every blob is re-hashed, every binding re-checked.
package verify

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Version states (DESIGN.md §4).
const (
	Verified     = "verified"
	Tampered     = "tampered"
	Unverifiable = "unverifiable"
)

// Journal identity states.
const (
	IdentityVerified     = "verified"
	IdentityMismatched   = "mismatched"
	IdentityUnverifiable = "unverifiable"
)

// Signature outcomes for a signed commit.
type sigState int

const (
	sigTrusted  sigState = iota // verifies against a pinned key of the writer
	sigUnpinned                 // verifies against the published key; nothing pins it
	sigNoKey                    // no key at all is known for the writer
	sigBad                      // missing, malformed, or does not verify
)

// SpineRecord is one entry of a lineage spine, located in its chain.
type SpineRecord struct {
	Writer   string
	Seq      int64
	Commit   gitstore.Oid
	Entry    record.SpineEntry
	ChainErr string // set when the entry does not sit where its chain says

	payload []byte
	sig     []byte
	tree    gitstore.Oid

	once      sync.Once
	sigState  sigState
	sigReason string
}

// Env is what verification reads: the objects, the refs, and the keys.
type Env struct {
	Objects *gitstore.Repo
	Refs    refs.Reader
	Trust   *keys.TrustSet
	// Published are the keys refs/bernstein/keys publishes, by writer. They
	// are not trusted; they only tell "unverifiable" from "tampered".
	Published map[string]ssh.PublicKey
}

// SpineIndex indexes every entry of every local lineage spine by hash.
type SpineIndex struct {
	env      *Env
	ByHash   map[record.Hash]*SpineRecord
	Writers  []string
	Records  map[string][]*SpineRecord // by writer, in chain order
	Seals    map[string][]*SpineRecord // by task
	Problems []Failure                 // chain-level problems found while indexing
}

// BuildSpineIndex walks every refs/bernstein/spine/* chain.
func BuildSpineIndex(env *Env) (*SpineIndex, error) {
	vals, names, err := env.Refs.List(refs.SpinePrefix)
	if err != nil {
		return nil, err
	}
	ix := &SpineIndex{env: env, ByHash: map[record.Hash]*SpineRecord{}, Records: map[string][]*SpineRecord{}, Seals: map[string][]*SpineRecord{}}
	for _, name := range names {
		writer := strings.TrimPrefix(name, refs.SpinePrefix)
		ix.Writers = append(ix.Writers, writer)
		ix.indexWriter(writer, vals[name])
	}
	return ix, nil
}

func (ix *SpineIndex) indexWriter(writer string, head gitstore.Oid) {
	commits := chain.WalkAll(ix.env.Objects, head)
	prev := record.Hash("")
	broken := ""
	for i, cc := range commits {
		rec := &SpineRecord{Writer: writer, Seq: int64(i), Commit: cc.ID, payload: cc.Payload, sig: cc.Commit.Signature, tree: cc.Commit.Tree}
		fail := func(reason string) {
			if broken == "" {
				broken = fmt.Sprintf("spine of %s is broken at seq %d: %s", writer, i, reason)
				ix.Problems = append(ix.Problems, Failure{Writer: writer, Seq: i64(int64(i)), Check: "spine_chain", Reason: broken})
			}
		}
		if cc.Err != nil {
			fail(cc.Err.Error())
			continue
		}
		e, err := record.ParseSpineEntry(cc.Record)
		if err != nil {
			fail(err.Error())
			continue
		}
		rec.Entry = e
		switch {
		case e.Header.Writer != writer:
			fail(fmt.Sprintf("entry names writer %q", e.Header.Writer))
		case e.Header.Seq != int64(i):
			fail(fmt.Sprintf("entry has seq %d", e.Header.Seq))
		case e.Header.Prev != prev:
			fail("entry's prev does not link to the entry before it")
		}
		rec.ChainErr = broken
		prev = e.Hash
		if _, dup := ix.ByHash[e.Hash]; !dup {
			ix.ByHash[e.Hash] = rec
		}
		ix.Records[writer] = append(ix.Records[writer], rec)
		if e.Seal != nil {
			ix.Seals[e.Seal.TaskID] = append(ix.Seals[e.Seal.TaskID], rec)
		}
	}
}

// Productions counts the artifact entries per task and key.
type Production struct {
	URI         string `json:"uri"`
	Task        string `json:"-"`
	Key         string `json:"-"`
	Productions int    `json:"productions"`
}

// Productions lists the artifact keys the spines carry.
func (ix *SpineIndex) Productions() []Production {
	counts := map[[2]string]int{}
	for _, w := range ix.Writers {
		for _, r := range ix.Records[w] {
			if a := r.Entry.Artifact; a != nil {
				counts[[2]string{a.TaskID, a.Key}]++
			}
		}
	}
	out := make([]Production, 0, len(counts))
	for k, n := range counts {
		out = append(out, Production{URI: "bernstein://" + k[0] + "/" + k[1], Task: k[0], Key: k[1], Productions: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Task != out[j].Task {
			return out[i].Task < out[j].Task
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// signature checks the commit signature of r once.
func (ix *SpineIndex) signature(r *SpineRecord) (sigState, string) {
	r.once.Do(func() { r.sigState, r.sigReason = checkSignature(ix.env, r.Writer, r.payload, r.sig) })
	return r.sigState, r.sigReason
}

// checkSignature classifies a commit signature by writer.
func checkSignature(env *Env, writer string, payload, armored []byte) (sigState, string) {
	if len(armored) == 0 {
		return sigBad, "commit is not signed"
	}
	claimed, _, err := keys.CommitSigner(armored)
	if err != nil {
		return sigBad, err.Error()
	}
	trusted := env.Trust.Trusted(writer)
	if len(trusted) > 0 {
		if !env.Trust.IsTrusted(writer, claimed) {
			return sigBad, fmt.Sprintf("signed by %s, which is not the pinned key of writer %s", ssh.FingerprintSHA256(claimed), writer)
		}
		if err := keys.VerifyCommit(payload, armored, claimed); err != nil {
			return sigBad, err.Error()
		}
		return sigTrusted, ""
	}
	pub, ok := env.Published[writer]
	if !ok {
		return sigNoKey, fmt.Sprintf("no key is known for writer %s", writer)
	}
	if ssh.FingerprintSHA256(pub) != ssh.FingerprintSHA256(claimed) {
		return sigBad, fmt.Sprintf("signed by %s, which refs/bernstein/keys does not publish for writer %s", ssh.FingerprintSHA256(claimed), writer)
	}
	if err := keys.VerifyCommit(payload, armored, claimed); err != nil {
		return sigBad, err.Error()
	}
	return sigUnpinned, fmt.Sprintf("writer %s's key is published but not pinned (pass --allowed-signers)", writer)
}

// sealSignature checks the detached sigstore signature a seal commit's tree
// carries over the seal entry.
func (ix *SpineIndex) sealSignature(r *SpineRecord, fileName string) error {
	es, err := readTree(ix.env.Objects, r.tree)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Name != fileName {
			continue
		}
		data, err := ix.env.Objects.ReadType(e.ID, gitstore.TypeBlob)
		if err != nil {
			return err
		}
		sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
		if err != nil {
			return fmt.Errorf("seal signature: %v", err)
		}
		claimed, _, err := keys.CommitSigner(r.sig)
		if err != nil {
			return err
		}
		if err := keys.VerifyDetached(claimed, r.Entry.Bytes, sig); err != nil {
			return fmt.Errorf("detached seal signature does not verify: %v", err)
		}
		return nil
	}
	return fmt.Errorf("seal commit carries no %s", fileName)
}

func readTree(objs *gitstore.Repo, id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id == gitstore.EmptyTree {
		return nil, nil
	}
	data, err := objs.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, err
	}
	return gitstore.ParseTree(data)
}

func i64(v int64) *int64 { return &v }
