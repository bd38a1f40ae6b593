package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
)

// The spine index a reader keeps between reads (verify/spinecache.go) is
// derived data: these tests make it stale, replay it, edit it without the
// writer's key, and forge it with the key, and check that every read still
// reports what the repository holds.

// spineIndexPath is where the reader keeps the test writer's spine index.
func (f *fixture) spineIndexPath() string {
	return filepath.Join(f.dir, ".git", "bernstein", "cache", "spine", hex.EncodeToString([]byte("test-writer"))+".v2.idx")
}

// readSpineIndex returns the kept index's first line (its MAC and the
// header's length) and content (the header, then the body).
func (f *fixture) readSpineIndex() (string, []byte) {
	f.t.Helper()
	b, err := os.ReadFile(f.spineIndexPath())
	if err != nil {
		f.t.Fatalf("no spine index kept after a read: %v", err)
	}
	line, content, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		f.t.Fatalf("spine index without a MAC line")
	}
	return string(line), content
}

// writeSpineIndex writes content as the kept index; with the writer's key
// it is sealed as the reader's own (a forger holding the key): the hash of
// every 4 KiB block of the body in the header's last bytes, the HMAC over
// the header (docs/format.md, Derived cache). Without the key it keeps line.
func (f *fixture) writeSpineIndex(line string, content []byte, withKey bool) {
	f.t.Helper()
	if withKey {
		_, size, _ := strings.Cut(line, " ")
		n, err := strconv.Atoi(size)
		if err != nil || n > len(content) {
			f.t.Fatalf("first line %q", line)
		}
		content = append([]byte(nil), content...)
		header, body := content[:n], content[n:]
		blocks := (len(body) + 4095) / 4096
		table := header[len(header)-32*blocks:]
		for i := 0; i < blocks; i++ {
			sum := sha256.Sum256(body[i*4096 : min((i+1)*4096, len(body))])
			copy(table[32*i:], sum[:])
		}
		id, err := keys.Load(f.home)
		if err != nil {
			f.t.Fatal(err)
		}
		line = id.MAC([]byte("bernstein spine index cache v2\ntest-writer\n--\n"+string(header))) + " " + size
	}
	if err := os.WriteFile(f.spineIndexPath(), append([]byte(line+"\n"), content...), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// rawOid is the 20 bytes of the commit rev names.
func (f *fixture) rawOid(rev string) []byte {
	f.t.Helper()
	b, err := hex.DecodeString(strings.TrimSpace(f.git("rev-parse", rev)))
	if err != nil || len(b) != 20 {
		f.t.Fatalf("rev-parse %s: %v", rev, err)
	}
	return b
}

// replaceOnce replaces the one occurrence of old in b.
func replaceOnce(t *testing.T, b, old, new []byte) []byte {
	t.Helper()
	if n := bytes.Count(b, old); n != 1 {
		t.Fatalf("%x occurs %d times in the spine index", old, n)
	}
	return bytes.Replace(b, old, new, 1)
}

// The index names its head first, then each entry's commit: the spine's
// head commit occurs twice, as the head and as the newest entry's commit.

// replaceHead replaces the head the index names (old's first occurrence).
func replaceHead(t *testing.T, b, old, new []byte) []byte {
	t.Helper()
	if n := bytes.Count(b, old); n != 2 {
		t.Fatalf("%x occurs %d times in the spine index", old, n)
	}
	return bytes.Replace(b, old, new, 1)
}

// replaceNewest replaces the newest entry's commit (old's last occurrence).
func replaceNewest(t *testing.T, b, old, new []byte) []byte {
	t.Helper()
	if n := bytes.Count(b, old); n != 2 {
		t.Fatalf("%x occurs %d times in the spine index", old, n)
	}
	i := bytes.LastIndex(b, old)
	out := append([]byte(nil), b...)
	copy(out[i:], new)
	return out
}

// states reads task's versions with a fresh Store: "key vN state" each.
func (f *fixture) states(task string) []string {
	f.t.Helper()
	s := f.open()
	defer s.Close()
	rep, err := s.Artifacts(task)
	if err != nil {
		f.t.Fatalf("artifacts %s: %v", task, err)
	}
	var out []string
	for _, v := range rep.Versions {
		out = append(out, v.Key+" v"+strconv.FormatInt(v.Version, 10)+" "+v.State)
	}
	return out
}

// TestSpineIndexKeptAndExtended: a read keeps the index; a read after more
// posts walks only the new entries onto it and reads every version, as many
// as git shows in the journal.
func TestSpineIndexKeptAndExtended(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SI-1", "agent")
	tok2 := f.claimed(s, "SI-2", "agent")
	f.post(s, "SI-1", "k", "agent", tok, report("one"))
	f.post(s, "SI-2", "k", "agent", tok2, report("other"))
	s.Close()
	if got := f.states("SI-1"); strings.Join(got, ",") != "k v1 verified" {
		t.Fatalf("first read: %v", got)
	}
	_, before := f.readSpineIndex()
	s = f.open()
	f.post(s, "SI-1", "k", "agent", tok, report("two"))
	f.post(s, "SI-1", "j", "agent", tok, report("three"))
	s.Close()
	got := f.states("SI-1")
	if rows := strings.TrimSpace(f.git("rev-list", "--count", refs.Journal("SI-1"))); rows != "3" || len(got) != 3 {
		t.Fatalf("journal has %s rows; read %v", rows, got)
	}
	for _, g := range got {
		if !strings.HasSuffix(g, " verified") {
			t.Fatalf("after new posts on a kept index: %v", got)
		}
	}
	// The kept index still names the older head: two new entries are not
	// worth rewriting it, and the read walked them onto it.
	if _, after := f.readSpineIndex(); !bytes.Equal(before, after) {
		t.Fatalf("the kept index was rewritten for two new entries")
	}
	if !bytes.Contains(before, f.rawOid(refs.Spine("test-writer")+"~2")) {
		t.Fatalf("the kept index does not name the spine head it was read at")
	}
}

// spineRolledBack makes SR-1 with versions v1 and v2 of k, reads it (the
// index is kept at the spine head), then moves the spine back one entry
// with plain git: v2's row names an entry the spine no longer holds.
func spineRolledBack(t *testing.T) (f *fixture, mac string, content, newer []byte) {
	f = newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SR-1", "agent")
	f.post(s, "SR-1", "k", "agent", tok, report("one"))
	f.post(s, "SR-1", "k", "agent", tok, report("two"))
	s.Close()
	if got := f.states("SR-1"); strings.Join(got, ",") != "k v1 verified,k v2 verified" {
		t.Fatalf("before the rollback: %v", got)
	}
	mac, content = f.readSpineIndex()
	spine := refs.Spine("test-writer")
	newer = f.rawOid(spine)
	f.git("update-ref", spine, spine+"~1")
	return f, mac, content, newer
}

const rolledBackStates = "k v1 verified,k v2 tampered"

// TestSpineIndexReplayedAfterRollback: the index kept at the newer head is
// still there (or put back) after the spine was rolled back: its head is
// not an ancestor of the spine's, so the spine is walked, and v2 is
// tampered.
func TestSpineIndexReplayedAfterRollback(t *testing.T) {
	f, mac, content, _ := spineRolledBack(t)
	f.writeSpineIndex(mac, content, false)
	if got := strings.Join(f.states("SR-1"), ","); got != rolledBackStates {
		t.Fatalf("after a rollback, with the index of the newer head: %s", got)
	}
}

// TestSpineIndexEditedWithoutKey: the index kept at the newer head, edited
// to name the rolled-back head (it then lists an entry the spine lacks),
// without the writer's key to MAC it: it is not used.
func TestSpineIndexEditedWithoutKey(t *testing.T) {
	f, mac, content, newer := spineRolledBack(t)
	spine := refs.Spine("test-writer")
	edited := replaceHead(t, content, newer, f.rawOid(spine))
	f.writeSpineIndex(mac, edited, false)
	if got := strings.Join(f.states("SR-1"), ","); got != rolledBackStates {
		t.Fatalf("after a rollback, with an edited index: %s", got)
	}
}

// TestSpineIndexForgedWithKey: an index MAC'd with the writer's key that
// points an entry elsewhere or drops it is caught by reading the entries a
// read decides on again from their commits: the index is dropped and the
// spines walked, so nothing is reported tampered that is not.
func TestSpineIndexForgedWithKey(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SF-1", "agent")
	tok2 := f.claimed(s, "SF-2", "agent")
	f.post(s, "SF-1", "k", "agent", tok, report("one"))
	f.post(s, "SF-2", "k", "agent", tok2, report("other"))
	s.Close()
	f.states("SF-1")
	mac, before := f.readSpineIndex() // kept at the head before v2
	s = f.open()
	res := f.post(s, "SF-1", "k", "agent", tok, report("two"))
	s.Close()
	const want = "k v1 verified,k v2 verified"
	spine := refs.Spine("test-writer")
	v2 := f.rawOid(spine)
	// An index that names the current head but lacks v2's entry.
	f.writeSpineIndex(mac, replaceHead(t, before, f.rawOid(spine+"~1"), v2), true)
	if got := strings.Join(f.states("SF-1"), ","); got != want {
		t.Errorf("an index that lacks v2's entry: %s", got)
	}
	if err := os.Remove(f.spineIndexPath()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.states("SF-1"), ","); got != want {
		t.Fatalf("before forging: %s", got)
	}
	mac, content := f.readSpineIndex()
	// The same record as v2's entry in a commit without its signature.
	raw := f.git("cat-file", "commit", spine)
	var unsigned strings.Builder
	inSig := false
	for _, line := range strings.SplitAfter(raw, "\n") {
		switch {
		case strings.HasPrefix(line, "gpgsig "):
			inSig = true
			continue
		case inSig && strings.HasPrefix(line, " "):
			continue
		}
		inSig = false
		unsigned.WriteString(line)
	}
	cmd := execGitStdin(f.dir, []byte(unsigned.String()), "hash-object", "-t", "commit", "-w", "--stdin")
	forged, err := hex.DecodeString(strings.TrimSpace(string(mustOutput(t, cmd))))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hex.DecodeString(strings.TrimPrefix(string(res.SpineEntryHash), "sha256:"))
	if err != nil || len(h) != 32 {
		t.Fatalf("spine entry hash %q", res.SpineEntryHash)
	}
	flipped := append([]byte(nil), h...)
	flipped[0] ^= 0xff
	for _, c := range []struct {
		name    string
		content []byte
	}{
		{"entry in an unsigned copy of its commit", replaceNewest(t, content, v2, forged)},
		{"entry in another task's entry's commit", replaceNewest(t, content, v2, f.rawOid(spine+"~1"))},
		{"entry's hash changed", replaceOnce(t, content, h, flipped)},
	} {
		f.writeSpineIndex(mac, c.content, true)
		if got := strings.Join(f.states("SF-1"), ","); got != want {
			t.Errorf("%s: %s", c.name, got)
		}
	}
	// And a truly tampered version stays tampered with a forged index: the
	// spine rolled back behind v2's entry, and an index at the rolled-back
	// head that still lists v2's entry, in the commit of SF-2's (signed by
	// the writer, but another entry).
	older := f.rawOid(spine + "~1")
	f.git("update-ref", spine, spine+"~1")
	for _, c := range []struct {
		name    string
		content []byte
	}{
		{"entry's hash changed", replaceHead(t, replaceOnce(t, content, h, flipped), v2, older)},
		{"entry in another task's entry's commit", bytes.ReplaceAll(content, v2, older)},
	} {
		f.writeSpineIndex(mac, c.content, true)
		if got := strings.Join(f.states("SF-1"), ","); got != "k v1 verified,k v2 tampered" {
			t.Errorf("rolled back, index forged (%s): %s", c.name, got)
		}
	}
}

// journalRolledBack makes SB-1 with versions v1 and v2 of k and SB-2 with
// one, reads SB-1 (the index is kept at the spine head, SB-1's records
// filed before SB-2's), then moves SB-1's journal back one row with plain
// git: the spine seals v2, which the journal no longer holds.
func journalRolledBack(t *testing.T) (f *fixture, line string, content []byte) {
	f = newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SB-1", "agent")
	tok2 := f.claimed(s, "SB-2", "agent")
	f.post(s, "SB-1", "k", "agent", tok, report("one"))
	f.post(s, "SB-1", "k", "agent", tok, report("two"))
	f.post(s, "SB-2", "k", "agent", tok2, report("other"))
	s.Close()
	if got := strings.Join(f.states("SB-1"), ","); got != "k v1 verified,k v2 verified" {
		t.Fatalf("before the rollback: %s", got)
	}
	line, content = f.readSpineIndex()
	f.git("update-ref", refs.Journal("SB-1"), refs.Journal("SB-1")+"~1")
	if rows := strings.TrimSpace(f.git("rev-list", "--count", refs.Journal("SB-1"))); rows != "1" {
		t.Fatalf("the journal holds %s rows after the rollback", rows)
	}
	return f, line, content
}

// lacksV2 checks that a read of SB-1 reports the spine entry of v2 the
// journal does not hold.
func (f *fixture) lacksV2(what string) {
	f.t.Helper()
	s := f.open()
	defer s.Close()
	rep, err := s.Artifacts("SB-1")
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
	if !rep.ChainBroken || !strings.Contains(rep.ChainReason, "seals k v2 at journal index 1, which the journal does not hold") {
		f.t.Fatalf("%s: the read does not report the entry of v2 the journal lacks: broken %v, %q", what, rep.ChainBroken, rep.ChainReason)
	}
}

// TestSpineIndexBodyEditedWithoutKey: a read of one task reads only some
// blocks of the kept index. v2's record, edited without the key to be filed
// under SB-2 (the records stay sorted: the edit moves the end of SB-1's run
// before it), is the record the search reads as that end: its block does
// not hash to the header's, the index is dropped, and the read still finds
// the spine entry the rolled-back journal lacks.
func TestSpineIndexBodyEditedWithoutKey(t *testing.T) {
	f, line, content := journalRolledBack(t)
	f.lacksV2("with the index as kept")
	v2 := f.rawOid(refs.Spine("test-writer"))
	at := bytes.LastIndex(content, v2) // v2's record (the first is the header's head)
	i := bytes.LastIndex(content[:at], []byte("SB-1"))
	if i < 0 || bytes.Count(content, v2) != 2 {
		t.Fatalf("v2's record not found in the kept index")
	}
	edited := append([]byte(nil), content...)
	copy(edited[i:], "SB-2")
	f.writeSpineIndex(line, edited, false)
	f.lacksV2("with v2's record refiled without the key")
	// Read whole (the list of productions), every block is checked.
	f.writeSpineIndex(line, edited, false)
	f.productions("with v2's record refiled without the key")
	f.writeSpineIndex(line, edited, false)
	f.lacksV2("with v2's record refiled without the key")
	// The index that did not hold is replaced by the one the read walked.
	if _, now := f.readSpineIndex(); bytes.Equal(now, edited) {
		t.Fatalf("the edited index is still kept after a read dropped it")
	}
	f.lacksV2("with the index kept again")
}

// TestSpineIndexPlaceOutsideForgedWithKey: an index sealed with the key
// whose first record lies, by the table of places, outside the body: it is
// dropped (no read outside it, no crash), for a read of one task and for
// the list of every production alike.
func TestSpineIndexPlaceOutsideForgedWithKey(t *testing.T) {
	f, line, content := journalRolledBack(t)
	_, size, _ := strings.Cut(line, " ")
	n, err := strconv.Atoi(size)
	if err != nil {
		t.Fatal(err)
	}
	forged := append([]byte(nil), content...)
	copy(forged[n:], []byte{0xff, 0xff, 0xff, 0x00}) // the body opens with the places of the records, 4 bytes each
	f.writeSpineIndex(line, forged, true)
	f.lacksV2("with a place outside the body")
	f.writeSpineIndex(line, forged, true)
	f.productions("with a place outside the body")
}

// productions checks the list of productions: SB-1/k twice, SB-2/k once,
// as the spine holds them.
func (f *fixture) productions(what string) {
	f.t.Helper()
	s := f.open()
	defer s.Close()
	prods, err := s.Productions()
	if err != nil {
		f.t.Fatal(err)
	}
	var got []string
	for _, p := range prods {
		got = append(got, p.URI+" "+strconv.Itoa(p.Productions))
	}
	if strings.Join(got, ",") != "bernstein://SB-1/k 2,bernstein://SB-2/k 1" {
		f.t.Fatalf("productions %s: %v", what, got)
	}
}

// keptThree makes SN-1 with v1 and v2 of k and SN-2 with one (posted
// between them), reads SN-1, and returns the kept index: three records,
// filed SN-1 v1, SN-1 v2, SN-2 v1, the newest (SN-1 v2) at place 1.
func keptThree(t *testing.T) (f *fixture, tok, line string, header, body []byte) {
	f = newFixture(t)
	s := f.open()
	tok = f.claimed(s, "SN-1", "agent")
	tok2 := f.claimed(s, "SN-2", "agent")
	f.post(s, "SN-1", "k", "agent", tok, report("one"))
	f.post(s, "SN-2", "k", "agent", tok2, report("other"))
	f.post(s, "SN-1", "k", "agent", tok, report("two"))
	s.Close()
	if got := strings.Join(f.states("SN-1"), ","); got != "k v1 verified,k v2 verified" {
		t.Fatalf("first read: %s", got)
	}
	line, content := f.readSpineIndex()
	_, size, _ := strings.Cut(line, " ")
	n, err := strconv.Atoi(size)
	if err != nil {
		t.Fatal(err)
	}
	return f, tok, line, content[:n:n], content[n:]
}

// TestSpineIndexNewestForgedWithKey: the header names the place of the
// newest entry, onto which the entries posted since are linked. Sealed
// with the key to name another record, it is caught (that record is not the
// newest in chain order): the spine is walked, and the new version is not
// reported on a broken spine.
func TestSpineIndexNewestForgedWithKey(t *testing.T) {
	f, tok, line, header, body := keptThree(t)
	// After the head: first entry a break affects (-1), its seq (-1), no
	// message, no check, 3 records, 3 hashes, the newest at place 1 (each
	// a zigzag varint of one byte).
	at := bytes.Index(header, f.rawOid(refs.Spine("test-writer"))) + 20
	if want := []byte{1, 1, 0, 0, 6, 6, 2}; at < 20 || !bytes.Equal(header[at:at+7], want) {
		t.Fatalf("header after the head: %v, want %v", header[at:at+7], want)
	}
	forged := append(slices.Clone(header), body...)
	forged[at+6] = 0 // the newest at place 0: SN-1 v1
	f.writeSpineIndex(line, forged, true)
	s := f.open()
	f.post(s, "SN-1", "k", "agent", tok, report("three"))
	s.Close()
	if got := strings.Join(f.states("SN-1"), ","); got != "k v1 verified,k v2 verified,k v3 verified" {
		t.Fatalf("with the newest entry forged: %s", got)
	}
}

// TestSpineIndexOrderForgedWithKey: every record names its place in chain
// order; sealed with the key so that two name the same one, or one a place
// past the last, a whole read (the list of productions) finds it and walks
// the spines.
func TestSpineIndexOrderForgedWithKey(t *testing.T) {
	f, _, line, header, body := keptThree(t)
	i := bytes.Index(body, []byte("\x04SN-2"))
	if i < 0 || body[i+5] != 2 {
		t.Fatalf("SN-2's record (task, then its place in chain order, 1) not found")
	}
	for _, c := range []struct {
		name string
		ord  byte
	}{{"two records at one place in chain order", 0}, {"a record past the last place", 0x7e}} {
		forged := slices.Clone(body)
		forged[i+5] = c.ord // a zigzag varint: 0, or 63
		f.writeSpineIndex(line, append(slices.Clone(header), forged...), true)
		s := f.open()
		prods, err := s.Productions()
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range prods {
			got = append(got, p.URI+" "+strconv.Itoa(p.Productions))
		}
		if strings.Join(got, ",") != "bernstein://SN-1/k 2,bernstein://SN-2/k 1" {
			t.Fatalf("productions with %s: %v", c.name, got)
		}
	}
}

// TestSpineIndexBlocksForgedWithKey: the header's hashes are one a 4 KiB
// block of the body its length gives. Sealed with the key to give a longer
// body than it hashes, the header is refused: the spine is walked.
func TestSpineIndexBlocksForgedWithKey(t *testing.T) {
	f, _, _, header, body := keptThree(t)
	at := bytes.Index(header, f.rawOid(refs.Spine("test-writer"))) + 20 + 7 // the body's length, after the newest place
	if _, w := binary.Varint(header[at:]); w <= 0 || len(header) != at+w+32 {
		t.Fatalf("the header does not end with the body's length and one block's hash")
	}
	_, w := binary.Varint(header[at:])
	forged := binary.AppendVarint(slices.Clone(header[:at]), 3*4096) // three blocks, one hash
	forged = append(forged, header[at+w:]...)
	f.writeSpineIndex("x "+strconv.Itoa(len(forged)), append(forged, body...), true)
	if got := strings.Join(f.states("SN-1"), ","); got != "k v1 verified,k v2 verified" {
		t.Fatalf("with a header that hashes fewer blocks than it gives: %s", got)
	}
}

// TestSpineIndexRewrittenAfterManyPosts: a read that walked 32 entries or
// more onto the kept index keeps the index again, at the spine's head, and
// reads from it every version as git shows them.
func TestSpineIndexRewrittenAfterManyPosts(t *testing.T) {
	f := newFixture(t)
	s := f.open()
	tok := f.claimed(s, "SM-1", "agent")
	f.post(s, "SM-1", "k", "agent", tok, report("v1"))
	s.Close()
	f.states("SM-1")
	_, before := f.readSpineIndex()
	s = f.open()
	for i := 2; i <= 34; i++ {
		f.post(s, "SM-1", "k", "agent", tok, report("v"+strconv.Itoa(i)))
	}
	s.Close()
	for round := 0; round < 2; round++ { // the read that rewrites, then one from the rewritten index
		got := f.states("SM-1")
		if rows := strings.TrimSpace(f.git("rev-list", "--count", refs.Journal("SM-1"))); rows != "34" || len(got) != 34 {
			t.Fatalf("round %d: the journal has %s rows; read %d versions", round, rows, len(got))
		}
		for _, g := range got {
			if !strings.HasSuffix(g, " verified") {
				t.Fatalf("round %d: %v", round, got)
			}
		}
		_, after := f.readSpineIndex()
		if bytes.Equal(before, after) || bytes.Count(after, f.rawOid(refs.Spine("test-writer"))) != 2 {
			t.Fatalf("round %d: the kept index is not the spine's at its head after 33 new entries", round)
		}
	}
}
