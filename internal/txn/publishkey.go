package txn

import (
	"encoding/base64"
	"fmt"

	"github.com/bernstein/bernstein/chain"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/internal/writers"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/record"
	"github.com/bernstein/bernstein/refs"
)

// Each writer publishes its public key in a ref of its own (internal/writers
// reads them): refs/bernstein/writers/<writer>.<key> from storage format 2
// on, refs/bernstein/writers/<writer> in a format-1 repository.

// PublishKey publishes the writer's key in its ref unless it is there.
func (t *Tx) PublishKey() (bool, error) {
	format, _, err := t.Format()
	if err != nil {
		return false, err
	}
	line := t.id.AuthorizedKey() + "\n"
	legacy := refs.Writer(t.id.Writer)
	head, err := t.w.c.Refs.ReadOptional(legacy)
	if err != nil {
		return false, err
	}
	if !head.IsZero() {
		published, err := writers.RefKey(t.w.c, head, t.id.Writer)
		if err != nil && format == record.FormatLegacy {
			return false, err
		}
		if err == nil && published+"\n" == line {
			return false, nil
		}
		if format == record.FormatLegacy {
			return false, fmt.Errorf("%s already publishes a different key for writer %s: this home's key is another one (a writer id is one key in a repository of storage format 1; 'bernstein upgrade' moves it to format 2, where a writer name's keys do not contend)", legacy, t.id.Writer)
		}
	}
	ref := legacy
	if format != record.FormatLegacy {
		ref = refs.WriterKey(t.id.Writer, refs.KeyHex(t.id.PublicKey().Marshal()))
	}
	c, err := t.chain(ref, func(c *Chain) error {
		cc, err := chain.Read(t.w.c.Objects, c.head)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		c.tree = cc.Commit.Tree
		return nil
	})
	if err != nil {
		return false, err
	}
	if !c.head.IsZero() {
		published, err := writers.RefKey(t.w.c, c.head, t.id.Writer)
		if err != nil {
			return false, err
		}
		if published+"\n" == line {
			return false, nil
		}
		return false, fmt.Errorf("%s publishes a key other than the one its name says: run 'bernstein audit verify'", ref)
	}
	rec := writers.KeyRecord{V: record.Version, Writer: t.id.Writer, Principal: keys.Principal(t.id.Writer), PublicKey: t.id.AuthorizedKey()}
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
	add(writers.AllowedSignersFile, []byte(keys.AllowedSignersLine(t.id.Writer, t.id.AuthorizedKey())+"\n"))
	tree := t.addTree(es)
	if err := t.addCommit(c, tree, t.id.Writer, record.Message("publish key of "+t.id.Writer, rb), true); err != nil {
		return false, err
	}
	if err := t.AppendAudit(record.EventWriterKey, t.id.Writer, "", string(record.Sum(rb)), rb); err != nil {
		return false, err
	}
	return true, nil
}
