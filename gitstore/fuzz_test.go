package gitstore

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Fuzz targets: the parsers and the pack reader must never panic, whatever
// the bytes. Run one with
//
//	go test -run='^$' -fuzz='^FuzzParseTree$' -fuzztime=20s ./gitstore

func FuzzParseTree(f *testing.F) {
	id := bytes.Repeat([]byte{0x5a}, 20)
	f.Add(EncodeTree([]TreeEntry{{ModeFile, "a.b", Oid{1}}, {ModeTree, "a", EmptyTree}, {ModeFile, "a-b", Oid{2}}}))
	f.Add(append([]byte("100644 f\x00"), id...))
	f.Add(append([]byte("40000 dir\x00"), id[:10]...))
	f.Add([]byte("100644 no-nul"))
	f.Add([]byte(" \x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ParseTree(data)
		if err != nil {
			return
		}
		// A parsed tree re-encodes to the same number of bytes, and its
		// encoding parses back to the same entries (in git's order).
		enc := EncodeTree(es)
		if len(enc) != len(data) {
			t.Fatalf("re-encoding changes the length: %d -> %d", len(data), len(enc))
		}
		back, err := ParseTree(enc)
		if err != nil || len(back) != len(es) {
			t.Fatalf("re-encoded tree does not parse: %v", err)
		}
		if !bytes.Equal(EncodeTree(back), enc) {
			t.Fatal("EncodeTree is not stable")
		}
	})
}

func FuzzParseCommit(f *testing.F) {
	tree := "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	plain := "tree " + tree + "\nparent " + tree + "\nauthor A <a@b> 1 +0000\ncommitter C <c@d> 2 +0000\n\nmessage\n"
	f.Add([]byte(plain))
	f.Add(EncodeCommit(Commit{Tree: EmptyTree, Author: "a", Committer: "c", Signature: []byte("-----BEGIN SSH SIGNATURE-----\nabc\n\n-----END SSH SIGNATURE-----\n"), Message: []byte("m")}))
	f.Add([]byte("tree " + tree + "\ngpgsig-sha256 x\n y\ngpgsig a\n b\n\n"))
	f.Add([]byte("tree " + tree + "\nmergetag object x\n type commit\n\n"))
	f.Add([]byte("\n\n"))
	f.Add([]byte("gpgsig\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, payload, err := ParseCommit(data)
		if err != nil {
			return
		}
		if len(payload) > len(data) {
			t.Fatalf("payload longer than the commit: %d > %d", len(payload), len(data))
		}
		if !bytes.HasSuffix(payload, c.Message) || !bytes.HasSuffix(data, c.Message) {
			t.Fatal("message is not the tail of the commit and of the payload")
		}
		// Without signature headers, the payload is the commit itself.
		if !bytes.Contains(data, []byte("\ngpgsig")) && !bytes.HasPrefix(data, []byte("gpgsig")) {
			if !bytes.Equal(payload, data) {
				t.Fatalf("unsigned commit: payload %q differs from %q", payload, data)
			}
			if c.Signature != nil {
				t.Fatal("signature without a gpgsig header")
			}
		}
		// A commit encoded from the parsed fields parses back to them.
		enc := EncodeCommit(c)
		c2, _, err := ParseCommit(enc)
		if err != nil {
			if bytes.ContainsAny([]byte(c.Author+c.Committer), "\n") {
				return
			}
			t.Fatalf("re-encoded commit does not parse: %v\n%q", err, enc)
		}
		if c2.Tree != c.Tree || len(c2.Parents) != len(c.Parents) || !bytes.Equal(c2.Message, c.Message) {
			t.Fatalf("round trip changed the commit:\n%+v\n%+v", c, c2)
		}
	})
}

// deltaHeader encodes a delta's two size varints.
func deltaHeader(src, dst int) []byte {
	var b []byte
	for _, v := range []int{src, dst} {
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		b = append(b, byte(v))
	}
	return b
}

func FuzzApplyDelta(f *testing.F) {
	base := []byte("the quick brown fox jumps over the lazy dog\n")
	// copy 10 bytes at 4, insert "cat", copy 0x10000 default size (too long).
	good := append(deltaHeader(len(base), 13), 0x91, 4, 10, 3, 'c', 'a', 't')
	f.Add(base, good)
	f.Add(base, append(deltaHeader(len(base), 0x10000), 0x80))
	f.Add(base, append(deltaHeader(len(base), 5), 0))
	f.Add([]byte{}, deltaHeader(0, 0))
	f.Add(base, append(deltaHeader(len(base), 1<<33), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
	f.Add(base, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, base, delta []byte) {
		out, err := applyDelta(base, delta)
		if err != nil {
			return
		}
		_, rest, _ := deltaVarint(delta)
		dst, _, _ := deltaVarint(rest)
		if uint64(len(out)) != dst {
			t.Fatalf("result has %d bytes, the delta declares %d", len(out), dst)
		}
	})
}

// memPack builds an in-memory pack of two entries, body holding both and
// the second starting at offset 12+split, with an index naming the first
// entry's id when it is the blob seedBase (and a fixed second id). dir is an
// empty object directory.
func memPack(dir string, body []byte, split uint16) (*Repo, *packIndex) {
	pack := append([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x02"), body...)
	pack = append(pack, make([]byte, 20)...)
	ids := []Oid{HashObject(TypeBlob, []byte(seedBase)), {0xff}}
	fan := make([]byte, 256*4)
	for i := 0; i < 256; i++ {
		n := 0
		for _, id := range ids {
			if int(id[0]) <= i {
				n++
			}
		}
		binary.BigEndian.PutUint32(fan[i*4:], uint32(n))
	}
	p := &packIndex{name: "mem", data: bytes.NewReader(pack), size: int64(len(pack)), count: 2, fanout: fan,
		names: append(ids[0][:], ids[1][:]...), offsets: make([]byte, 8), crcs: make([]byte, 8)}
	binary.BigEndian.PutUint32(p.offsets, 12)
	binary.BigEndian.PutUint32(p.offsets[4:], 12+uint32(split))
	// p is not mapped: it must never be closed (munmap), so it stays out of
	// r.packs, and a REF_DELTA base outside it is missing.
	r := &Repo{dir: dir, known: map[string]bool{}, deltaCache: map[deltaKey]cachedObject{}}
	return r, p
}

const seedBase = "hello, base object\n"

// packSeeds returns pack bodies: a blob and a tree, a blob and an OFS_DELTA
// on it, a blob and a REF_DELTA on it (both deltas give "hello, base").
func packSeeds() (bodies [][]byte, split uint16) {
	e1 := encodeEntry(blob(seedBase))
	e2 := encodeEntry(NewObject(TypeTree, EncodeTree([]TreeEntry{{ModeFile, "f", Oid{9}}})))
	delta := append(deltaHeader(len(seedBase), 11), 0x90, 7, 4, 'b', 'a', 's', 'e')
	var ofs bytes.Buffer
	writeEntryHeader(&ofs, packOfsDelta, int64(len(delta)))
	ofs.WriteByte(byte(len(e1.raw))) // one-byte relative offset back to the first entry
	ofs.Write(zlibOf(delta))
	var ref bytes.Buffer
	writeEntryHeader(&ref, packRefDelta, int64(len(delta)))
	ref.Write(e1.id[:])
	ref.Write(zlibOf(delta))
	cat := func(a, b []byte) []byte { return append(append([]byte{}, a...), b...) }
	return [][]byte{cat(e1.raw, e2.raw), cat(e1.raw, ofs.Bytes()), cat(e1.raw, ref.Bytes())}, uint16(len(e1.raw))
}

func TestPackSeedsDecode(t *testing.T) {
	bodies, split := packSeeds()
	dir := t.TempDir()
	for i, body := range bodies {
		r, p := memPack(dir, body, split)
		typ, data, err := r.readPacked(p, 12, 0)
		if err != nil || typ != TypeBlob || string(data) != seedBase {
			t.Fatalf("seed %d, first entry: %s %q %v", i, typ, data, err)
		}
		typ, data, err = r.readPacked(p, 12+int64(split), 0)
		if err != nil {
			t.Fatalf("seed %d, second entry: %v", i, err)
		}
		if i > 0 && (typ != TypeBlob || string(data) != "hello, base") {
			t.Fatalf("seed %d: delta gives %s %q", i, typ, data)
		}
	}
}

// FuzzReadPackEntry reads pack entries (headers, zlib data, OFS_DELTA and
// REF_DELTA chains) from arbitrary bytes; it must fail cleanly, not panic.
func FuzzReadPackEntry(f *testing.F) {
	bodies, split := packSeeds()
	for _, b := range bodies {
		f.Add(b, split)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, uint16(0))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body []byte, split uint16) {
		r, p := memPack(dir, body, split)
		for _, off := range []int64{12, 12 + int64(split)} {
			typ, data, err := r.readPacked(p, off, 0)
			if err == nil && (typ < TypeCommit || typ > TypeTag) {
				t.Fatalf("entry at %d read as type %d (%d bytes)", off, typ, len(data))
			}
		}
	})
}
