// Package writers reads the keys writers publish: each writer's key in a
// ref of its own, refs/bernstein/writers/<writer>, and the single ref
// refs/bernstein/keys that earlier versions wrote.
package writers

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/core"
	"github.com/bernstein/bernstein/refs"
)

// Each writer publishes its public key in a ref of its own: from storage
// format 2 on refs/bernstein/writers/<writer>.<key> (<key> the key's
// SHA-256 in hex), one ref per key, so that two keys never contend for
// one ref and a squatter's key published under a writer's name changes
// nothing of the writer's own; in a format-1 repository
// refs/bernstein/writers/<writer>. Either is a chain of signed commits whose tree
// holds <writer>.pub, the signed key record (<writer>.json and its detached
// signature <writer>.json.sig) and an allowed_signers line. Hosts that init
// on their own therefore never write to one ref, and their keys merge on a
// remote without a conflict or a forced push. The single ref
// refs/bernstein/keys that earlier versions wrote is still read. Published
// keys are not trusted: they tell "unverifiable" from "tampered" and what
// `keys pin` would pin; trust is pinning (docs/trust.md).

// KeyRecord is the published record of a writer's public key.
type KeyRecord struct {
	V         int    `json:"v"`
	Writer    string `json:"writer"`
	Principal string `json:"principal"`
	PublicKey string `json:"public_key"`
}

// Files of a writer's key ref (and of the legacy refs/bernstein/keys).
const (
	AllowedSignersFile = "allowed_signers"
)

// RefKey reads the key a writer's ref publishes at head.
func RefKey(c *core.Repo, head gitstore.Oid, writer string) (string, error) {
	cc, err := chain.Read(c.Objects, head)
	if err != nil {
		return "", err
	}
	es, err := c.ReadTree(cc.Commit.Tree)
	if err != nil {
		return "", err
	}
	for _, e := range es {
		if e.Name == writer+".pub" {
			data, err := c.Objects.ReadType(e.ID, gitstore.TypeBlob)
			if err != nil {
				return "", err
			}
			return strings.TrimSpace(string(data)), nil
		}
	}
	return "", noKeyFile(fmt.Sprintf("%s publishes no %s.pub", refs.Writer(writer), writer))
}

// ErrNoKeyFile is the error of RefKey for a commit whose tree holds no
// key file for the writer.
var ErrNoKeyFile = errors.New("publishes no key file")

type noKeyFile string

func (e noKeyFile) Error() string        { return string(e) }
func (e noKeyFile) Is(target error) bool { return target == ErrNoKeyFile }

// PublishedKey is one writer's published key and where it was found.
type PublishedKey struct {
	Writer string
	Key    string // authorized key line
	Source string // the ref that publishes it
	// Problem says why the ref publishes no key it can be read for (its
	// commit or tree does not parse, or, for a ref named by its key, the key
	// is another one); Key is then "".
	Problem string
}

// Keys reads the published keys in view: writer -> authorized key lines,
// one per key published under the name (in the order of List). These keys
// are not trusted by themselves; see docs/trust.md.
func Keys(c *core.Repo, view refs.Source) (map[string][]string, error) {
	list, err := List(c, view)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(list))
	for _, k := range list {
		if k.Problem == "" && !slices.Contains(out[k.Writer], k.Key) {
			out[k.Writer] = append(out[k.Writer], k.Key)
		}
	}
	return out, nil
}

// List reads every writer's ref in view (refs/bernstein/writers/<writer>
// and, from format 2 on, refs/bernstein/writers/<writer>.<key>: one ref per
// key, so a name may have several), then the legacy keys ref for writers no
// ref of their own publishes. A writer ref that cannot be read is listed
// with its problem (it publishes no key: as good as none, but `keys list`
// and fetch say so).
func List(c *core.Repo, view refs.Source) ([]PublishedKey, error) {
	var out []PublishedKey
	seen := map[string]bool{}
	vals, names, err := view.List(refs.WritersPrefix)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		w, keyHex, err := refs.ParseWriterRef(name)
		if err != nil {
			continue
		}
		seen[w] = true
		key, err := RefKey(c, vals[name], w)
		if err == nil && keyHex != "" {
			err = checkNamed(key, keyHex)
		}
		if err != nil {
			out = append(out, PublishedKey{Writer: w, Source: name, Problem: err.Error()})
			continue
		}
		out = append(out, PublishedKey{Writer: w, Key: key, Source: name})
	}
	head, err := view.ReadOptional(refs.Keys)
	if err != nil || head.IsZero() {
		return out, err
	}
	cc, err := chain.Read(c.Objects, head)
	if err != nil {
		return nil, err
	}
	es, err := c.ReadTree(cc.Commit.Tree)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		w, ok := strings.CutSuffix(e.Name, ".pub")
		if !ok || seen[w] {
			continue
		}
		data, err := c.Objects.ReadType(e.ID, gitstore.TypeBlob)
		if err != nil {
			return nil, err
		}
		out = append(out, PublishedKey{Writer: w, Key: strings.TrimSpace(string(data)), Source: refs.Keys})
	}
	return out, nil
}

// checkNamed checks that the key a ref named by a key's hex fingerprint
// publishes is that key.
func checkNamed(line, keyHex string) error {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return err
	}
	if got := refs.KeyHex(k.Marshal()); got != keyHex {
		return fmt.Errorf("the ref is named for key %s but publishes %s", keyHex, ssh.FingerprintSHA256(k))
	}
	return nil
}

// Version names the state of the published keys in view: a hash of every
// ref that publishes one.
func Version(view refs.Source) (gitstore.Oid, error) {
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
