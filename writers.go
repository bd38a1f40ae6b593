package bernstein

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Each writer publishes its public key in a ref of its own,
// refs/bernstein/writers/<writer>: a chain of signed commits whose tree
// holds <writer>.pub, the signed key record (<writer>.json and its detached
// signature <writer>.json.sig) and an allowed_signers line. Hosts that init
// on their own therefore never write to one ref, and their keys merge on a
// remote without a conflict or a forced push. The single ref
// refs/bernstein/keys that earlier versions wrote is still read. Published
// keys are not trusted: they tell "unverifiable" from "tampered" and what
// `keys pin` would pin; trust is pinning (docs/trust.md).

// publishKey publishes the writer's key in its ref unless it is there.
func (t *tx) publishKey() (bool, error) {
	ref := refs.Writer(t.id.Writer)
	c, err := t.chain(ref, func(c *chainState) error {
		cc, err := t.s.readChainCommit(c.head)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		c.tree = cc.Commit.Tree
		return nil
	})
	if err != nil {
		return false, err
	}
	line := t.id.AuthorizedKey() + "\n"
	if !c.head.IsZero() {
		published, err := t.s.writerRefKey(c.head, t.id.Writer)
		if err != nil {
			return false, err
		}
		if published+"\n" == line {
			return false, nil
		}
		return false, fmt.Errorf("%s already publishes a different key for writer %s: this home's key is another one (a writer id is one key)", ref, t.id.Writer)
	}
	rec := KeyRecord{V: record.Version, Writer: t.id.Writer, Principal: keys.Principal(t.id.Writer), PublicKey: t.id.AuthorizedKey()}
	rb, err := record.Canonical(rec)
	if err != nil {
		return false, err
	}
	sig, err := t.id.SignDetached(rb)
	if err != nil {
		return false, err
	}
	var es []gitstore.TreeEntry
	add := func(name string, data []byte) {
		es = append(es, gitstore.TreeEntry{Mode: gitstore.ModeFile, Name: name, ID: t.addBlob(data)})
	}
	add(t.id.Writer+".pub", []byte(line))
	add(t.id.Writer+".json", append(rb, '\n'))
	add(t.id.Writer+".json.sig", []byte(base64.StdEncoding.EncodeToString(sig)+"\n"))
	add(AllowedSignersFile, []byte(keys.AllowedSignersLine(t.id.Writer, t.id.AuthorizedKey())+"\n"))
	tree := t.addTree(es)
	if err := t.addCommit(c, tree, t.id.Writer, record.Message("publish key of "+t.id.Writer, rb), true); err != nil {
		return false, err
	}
	if err := t.appendAudit(record.EventWriterKey, t.id.Writer, "", string(record.Sum(rb)), rb); err != nil {
		return false, err
	}
	return true, nil
}

// writerRefKey reads the key a writer's ref publishes at head.
func (s *Store) writerRefKey(head gitstore.Oid, writer string) (string, error) {
	cc, err := s.readChainCommit(head)
	if err != nil {
		return "", err
	}
	es, err := s.readTree(cc.Commit.Tree)
	if err != nil {
		return "", err
	}
	for _, e := range es {
		if e.Name == writer+".pub" {
			data, err := s.objects.ReadType(e.ID, gitstore.TypeBlob)
			if err != nil {
				return "", err
			}
			return strings.TrimSpace(string(data)), nil
		}
	}
	return "", fmt.Errorf("%s publishes no %s.pub", refs.Writer(writer), writer)
}

// PublishedKey is one writer's published key and where it was found.
type PublishedKey struct {
	Writer string
	Key    string // authorized key line
	Source string // the ref that publishes it
	// Problem says why the ref publishes no key it can be read for (its
	// commit or tree does not parse); Key is then "".
	Problem string
}

// PublishedKeys reads the published keys: writer -> authorized key line.
// These keys are not trusted by themselves; see docs/trust.md.
func (s *Store) PublishedKeys() (map[string]string, error) {
	view, err := s.refs.Snapshot(refs.KeyScope...)
	if err != nil {
		return nil, err
	}
	return s.publishedKeys(view)
}

func (s *Store) publishedKeys(view refs.Source) (map[string]string, error) {
	list, err := s.publishedKeyList(view)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(list))
	for _, k := range list {
		if k.Problem == "" {
			out[k.Writer] = k.Key
		}
	}
	return out, nil
}

// publishedKeyList reads every writer's ref, then the legacy keys ref for
// writers no ref of their own publishes. A writer ref that cannot be read is
// listed with its problem (it publishes no key: as good as none, but `keys
// list` and fetch say so).
func (s *Store) publishedKeyList(view refs.Source) ([]PublishedKey, error) {
	var out []PublishedKey
	seen := map[string]bool{}
	vals, names, err := view.List(refs.WritersPrefix)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		w := strings.TrimPrefix(name, refs.WritersPrefix)
		if refs.ValidateWriter(w) != nil {
			continue
		}
		key, err := s.writerRefKey(vals[name], w)
		if err != nil {
			out = append(out, PublishedKey{Writer: w, Source: name, Problem: err.Error()})
			seen[w] = true
			continue
		}
		out = append(out, PublishedKey{Writer: w, Key: key, Source: name})
		seen[w] = true
	}
	head, err := view.ReadOptional(refs.Keys)
	if err != nil || head.IsZero() {
		return out, err
	}
	cc, err := s.readChainCommit(head)
	if err != nil {
		return nil, err
	}
	es, err := s.readTree(cc.Commit.Tree)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		w, ok := strings.CutSuffix(e.Name, ".pub")
		if !ok || seen[w] {
			continue
		}
		data, err := s.objects.ReadType(e.ID, gitstore.TypeBlob)
		if err != nil {
			return nil, err
		}
		out = append(out, PublishedKey{Writer: w, Key: strings.TrimSpace(string(data)), Source: refs.Keys})
	}
	return out, nil
}

// keysVersion names the state of the published keys in view: a hash of
// every ref that publishes one.
func keysVersion(view refs.Source) (gitstore.Oid, error) {
	var b bytes.Buffer
	k, err := view.ReadOptional(refs.Keys)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	fmt.Fprintf(&b, "%s %s\n", refs.Keys, k)
	vals, names, err := view.List(refs.WritersPrefix)
	if err != nil {
		return gitstore.ZeroOid, err
	}
	for _, n := range names {
		fmt.Fprintf(&b, "%s %s\n", n, vals[n])
	}
	return gitstore.HashObject(gitstore.TypeBlob, b.Bytes()), nil
}
