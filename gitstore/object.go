// Package gitstore is bernstein's git object database: it encodes and parses
// blobs, trees and commits, writes new objects as durable packs, reads loose
// and packed objects (deltas included), and re-checks object ids on demand.
package gitstore

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Oid is a git object id (SHA-1).
type Oid [20]byte

// ZeroOid is the all-zero id git uses for "no object".
var ZeroOid Oid

// String returns the 40-digit hex form.
func (o Oid) String() string { return hex.EncodeToString(o[:]) }

// IsZero reports whether o is the zero id.
func (o Oid) IsZero() bool { return o == ZeroOid }

// looseStandInMark starts every LooseStandIn: eight zero bytes, which no
// object id git computes starts with but by a chance of 2^-64.
var looseStandInMark [8]byte

// LooseStandIn is the value a ref reads as when its loose file holds no
// object id (text written by hand, a symbolic ref): an id that names no
// object (Repo.Read reports it missing, saying what it stands for), derived
// from the file's bytes so that a compare-and-swap over the file holds only
// while it holds those bytes. git reads such a ref as having no value.
func LooseStandIn(content []byte) Oid {
	sum := sha256.Sum256(append([]byte("bernstein loose ref file\x00"), content...))
	var o Oid
	copy(o[len(looseStandInMark):], sum[:])
	if o.IsZero() {
		o[len(o)-1] = 1
	}
	return o
}

// IsLooseStandIn reports whether o is a LooseStandIn.
func (o Oid) IsLooseStandIn() bool {
	return !o.IsZero() && [8]byte(o[:8]) == looseStandInMark
}

// ParseOid parses a 40-digit hex object id.
func ParseOid(s string) (Oid, error) {
	var o Oid
	if len(s) != 40 {
		return o, fmt.Errorf("object id %q: want 40 hex digits", s)
	}
	if _, err := hex.Decode(o[:], []byte(s)); err != nil {
		return o, fmt.Errorf("object id %q: %w", s, err)
	}
	return o, nil
}

// ObjectType is a git object type, numbered as in pack files.
type ObjectType int8

// Object types.
const (
	TypeCommit ObjectType = 1
	TypeTree   ObjectType = 2
	TypeBlob   ObjectType = 3
	TypeTag    ObjectType = 4
)

func (t ObjectType) String() string {
	switch t {
	case TypeCommit:
		return "commit"
	case TypeTree:
		return "tree"
	case TypeBlob:
		return "blob"
	case TypeTag:
		return "tag"
	}
	return "type" + strconv.Itoa(int(t))
}

func parseType(s string) (ObjectType, error) {
	switch s {
	case "commit":
		return TypeCommit, nil
	case "tree":
		return TypeTree, nil
	case "blob":
		return TypeBlob, nil
	case "tag":
		return TypeTag, nil
	}
	return 0, fmt.Errorf("unknown object type %q", s)
}

// HashObject returns the git object id of data as an object of type t.
func HashObject(t ObjectType, data []byte) Oid {
	h := sha1.New()
	h.Write([]byte(t.String()))
	h.Write([]byte{' '})
	h.Write([]byte(strconv.Itoa(len(data))))
	h.Write([]byte{0})
	h.Write(data)
	var o Oid
	h.Sum(o[:0])
	return o
}

// Object is an encoded object ready to be written.
type Object struct {
	Type ObjectType
	Data []byte
	ID   Oid
}

// NewObject hashes data as type t.
func NewObject(t ObjectType, data []byte) Object {
	return Object{Type: t, Data: data, ID: HashObject(t, data)}
}

// EmptyTree is the id of the tree with no entries.
var EmptyTree = HashObject(TypeTree, nil)

// Tree entry modes. A gitlink (mode 160000) names a commit, not a blob or a
// tree: git neither follows it for reachability nor descends into it, and it
// sorts as a file does (by its name alone), as every mode but ModeTree does.
const (
	ModeFile    = "100644"
	ModeTree    = "40000"
	ModeGitlink = "160000"
)

// TreeEntry is one entry of a tree object.
type TreeEntry struct {
	Mode string
	Name string
	ID   Oid
}

// IsTree reports whether the entry names a subtree.
func (e TreeEntry) IsTree() bool { return e.Mode == ModeTree }

// sortKey is git's tree order: names compared bytewise, a subtree as if its
// name ended in '/'; a gitlink sorts by its name alone, as a file does (git
// appends '/' only for S_ISDIR modes, and 160000 is not one).
func (e TreeEntry) sortKey() string {
	if e.IsTree() {
		return e.Name + "/"
	}
	return e.Name
}

// EncodeTree returns the canonical tree object bytes for entries.
func EncodeTree(entries []TreeEntry) []byte {
	es := append([]TreeEntry(nil), entries...)
	sort.Slice(es, func(i, j int) bool { return es[i].sortKey() < es[j].sortKey() })
	var b bytes.Buffer
	for _, e := range es {
		b.WriteString(e.Mode)
		b.WriteByte(' ')
		b.WriteString(e.Name)
		b.WriteByte(0)
		b.Write(e.ID[:])
	}
	return b.Bytes()
}

// ParseTree parses tree object bytes.
func ParseTree(data []byte) ([]TreeEntry, error) {
	var es []TreeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, errors.New("tree: malformed entry mode")
		}
		nul := bytes.IndexByte(data[sp:], 0)
		if nul < 0 || sp+nul+21 > len(data) {
			return nil, errors.New("tree: truncated entry")
		}
		nul += sp
		var e TreeEntry
		e.Mode = string(data[:sp])
		e.Name = string(data[sp+1 : nul])
		copy(e.ID[:], data[nul+1:nul+21])
		es = append(es, e)
		data = data[nul+21:]
	}
	return es, nil
}

// Commit is a parsed commit object. Signature holds the armored signature of
// a gpgsig header, if any.
type Commit struct {
	Tree      Oid
	Parents   []Oid
	Author    string
	Committer string
	Signature []byte
	Message   []byte
}

// Ident formats a git identity line value.
func Ident(name, email string, unix int64) string {
	return name + " <" + email + "> " + strconv.FormatInt(unix, 10) + " +0000"
}

// EncodeCommit returns the commit object bytes; with the signature left out
// they are exactly the payload a signature covers.
func EncodeCommit(c Commit) []byte {
	var b bytes.Buffer
	b.WriteString("tree ")
	b.WriteString(c.Tree.String())
	b.WriteByte('\n')
	for _, p := range c.Parents {
		b.WriteString("parent ")
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	b.WriteString("author ")
	b.WriteString(c.Author)
	b.WriteByte('\n')
	b.WriteString("committer ")
	b.WriteString(c.Committer)
	b.WriteByte('\n')
	if len(c.Signature) > 0 {
		sig := bytes.TrimRight(c.Signature, "\n")
		b.WriteString("gpgsig ")
		b.Write(bytes.ReplaceAll(sig, []byte("\n"), []byte("\n ")))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(c.Message)
	return b.Bytes()
}

// ParseCommit parses commit object bytes. It also returns the signed payload:
// the commit with its gpgsig header removed, as git computes it.
func ParseCommit(data []byte) (Commit, []byte, error) {
	return parseCommit(data, true, false)
}

// ParseCommitInPlace is ParseCommit for a caller that owns data and gives it
// up: the payload is built in data's own array (it is data less the
// signature lines, so it never overtakes what is still to be read), and the
// payload and Message alias it. It saves a copy of every commit a walk
// reads.
func ParseCommitInPlace(data []byte) (Commit, []byte, error) {
	return parseCommit(data, true, true)
}

// ParseCommitLinks parses what a chain walk needs of a commit: tree, parents,
// identities and message, without building the signed payload.
func ParseCommitLinks(data []byte) (Commit, error) {
	c, _, err := parseCommit(data, false, false)
	return c, err
}

func parseCommit(data []byte, wantPayload, inPlace bool) (Commit, []byte, error) {
	var c Commit
	end := bytes.Index(data, []byte("\n\n"))
	if end < 0 {
		return c, nil, errors.New("commit: no message separator")
	}
	header := data[:end+1]
	c.Message = data[end+2:]
	var payload []byte
	switch {
	case wantPayload && inPlace:
		payload = data[:0]
	case wantPayload:
		payload = make([]byte, 0, len(data))
	}
	var sig bytes.Buffer
	inSig := false
	inOther := false // another signature header (gpgsig-sha256): git leaves it out of the payload too
	sawTree := false
	for len(header) > 0 {
		nl := bytes.IndexByte(header, '\n')
		line := header[:nl]
		full := header[:nl+1]
		header = header[nl+1:]
		if len(line) > 0 && line[0] == ' ' {
			if inSig {
				sig.Write(line[1:])
				sig.WriteByte('\n')
			} else if !inOther && wantPayload {
				payload = append(payload, full...)
			}
			continue
		}
		inSig, inOther = false, false
		k, v, _ := bytes.Cut(line, []byte(" "))
		switch string(k) {
		case "tree":
			o, err := ParseOid(string(v))
			if err != nil {
				return c, nil, fmt.Errorf("commit tree: %w", err)
			}
			c.Tree, sawTree = o, true
		case "parent":
			o, err := ParseOid(string(v))
			if err != nil {
				return c, nil, fmt.Errorf("commit parent: %w", err)
			}
			if c.Parents == nil {
				c.Parents = make([]Oid, 0, 1)
			}
			c.Parents = append(c.Parents, o)
		case "author":
			c.Author = string(v)
		case "committer":
			c.Committer = string(v)
		case "gpgsig":
			inSig = true
			sig.Grow(len(header) + len(v) + 1) // the signature's lines: one allocation
			sig.Write(v)
			sig.WriteByte('\n')
			continue
		default:
			if bytes.HasPrefix(k, []byte("gpgsig")) {
				inOther = true
				continue
			}
		}
		if wantPayload {
			payload = append(payload, full...)
		}
	}
	if !sawTree {
		return c, nil, errors.New("commit: no tree")
	}
	if sig.Len() > 0 {
		c.Signature = sig.Bytes()
	}
	if wantPayload {
		payload = append(payload, '\n')
		payload = append(payload, c.Message...)
		if inPlace {
			// The message moved down over the signature lines.
			c.Message = payload[len(payload)-len(c.Message):]
		}
	}
	return c, payload, nil
}
