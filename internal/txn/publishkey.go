package txn

import (
	"encoding/base64"
	"errors"
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
		if c, ok, err := t.republish(ref, line); err != nil || !ok {
			return false, err
		} else if c != nil {
			return true, t.publishRecord(c, line)
		}
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
	return true, t.publishRecord(c, line)
}

// republish reads the writer's own key ref (named by its key, storage
// format 2 on). One that publishes the writer's key is left (ok false);
// one that cannot be read as a record of it (its loose file no object id,
// a blob, a missing object, a commit that carries no record or another
// key: written with plain git, for only this writer publishes under its
// key's name) is written again, as a new record that replaces the value
// read under compare-and-swap: c is its chain. A ref that does not exist
// gives (nil, true).
func (t *Tx) republish(ref, line string) (c *Chain, ok bool, err error) {
	if c := t.chains[ref]; c != nil {
		return nil, true, nil
	}
	head, err := t.w.c.Refs.ReadOptional(ref)
	if err != nil || head.IsZero() {
		return nil, err == nil, err
	}
	published, err := writers.RefKey(t.w.c, head, t.id.Writer)
	if err == nil && published+"\n" == line {
		return nil, false, nil
	}
	if err != nil && !errors.Is(err, writers.ErrNoKeyFile) && !errors.Is(err, chain.ErrUnreadable) && !errors.Is(err, chain.ErrNotLinear) &&
		!errors.Is(err, gitstore.ErrMissing) && !errors.Is(err, gitstore.ErrCorrupt) {
		return nil, false, fmt.Errorf("%s: %w", ref, err)
	}
	c = &Chain{ref: ref, old: head}
	t.chains[ref] = c
	return c, true, nil
}

// publishRecord appends the writer's signed key record to c, and its
// audit entry.
func (t *Tx) publishRecord(c *Chain, line string) error {
	rec := writers.KeyRecord{V: record.Version, Writer: t.id.Writer, Principal: keys.Principal(t.id.Writer), PublicKey: t.id.AuthorizedKey()}
	rb, err := record.Canonical(rec)
	if err != nil {
		return err
	}
	sig, err := t.id.SignDetached(rb)
	if err != nil {
		return err
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
		return err
	}
	return t.AppendAudit(record.EventWriterKey, t.id.Writer, "", string(record.Sum(rb)), rb)
}
