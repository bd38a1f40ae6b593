package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseOid(t *testing.T) {
	const s = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	o, err := ParseOid(s)
	if err != nil {
		t.Fatal(err)
	}
	if o.String() != s {
		t.Fatalf("String() = %s, want %s", o, s)
	}
	if o.IsZero() || !ZeroOid.IsZero() {
		t.Fatal("IsZero is wrong")
	}
	if ZeroOid.String() != strings.Repeat("0", 40) {
		t.Fatalf("ZeroOid = %s", ZeroOid)
	}
	for _, bad := range []string{"", s[:39], s + "0", strings.Replace(s, "4", "g", 1), strings.ToUpper(s)[:39] + "-"} {
		if _, err := ParseOid(bad); err == nil {
			t.Errorf("ParseOid(%q) accepted", bad)
		}
	}
}

func TestObjectTypeNames(t *testing.T) {
	for _, c := range []struct {
		t    ObjectType
		name string
	}{{TypeCommit, "commit"}, {TypeTree, "tree"}, {TypeBlob, "blob"}, {TypeTag, "tag"}} {
		if c.t.String() != c.name {
			t.Errorf("%d.String() = %q, want %q", c.t, c.t.String(), c.name)
		}
		if got, err := parseType(c.name); err != nil || got != c.t {
			t.Errorf("parseType(%q) = %v, %v", c.name, got, err)
		}
	}
	if _, err := parseType("ofs-delta"); err == nil {
		t.Error("parseType accepted an unknown type")
	}
	if ObjectType(6).String() != "type6" {
		t.Errorf("ObjectType(6).String() = %q", ObjectType(6).String())
	}
}

func TestHashObjectBlobMatchesGit(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	blobs := [][]byte{
		nil,
		[]byte("hello\n"),
		[]byte("no trailing newline"),
		{0, 1, 2, 0, 0xff, '\n', '\r', 0},
		textBytes(1, 70000),
		randomBytes(t, 1<<20+17),
	}
	for i, b := range blobs {
		want := strings.TrimSpace(gitIn(t, dir, b, "hash-object", "-t", "blob", "--stdin"))
		if got := HashObject(TypeBlob, b).String(); got != want {
			t.Errorf("blob %d (%d bytes): HashObject = %s, git hash-object = %s", i, len(b), got, want)
		}
		if o := NewObject(TypeBlob, b); o.ID.String() != want || !bytes.Equal(o.Data, b) || o.Type != TypeBlob {
			t.Errorf("blob %d: NewObject = %+v", i, o.ID)
		}
	}
	// The well-known empty ids.
	if got := HashObject(TypeBlob, nil).String(); got != "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391" {
		t.Errorf("empty blob = %s", got)
	}
	if got := EmptyTree.String(); got != "4b825dc642cb6eb9a060e54bf8d69288fbee4904" {
		t.Errorf("EmptyTree = %s", got)
	}
	want := strings.TrimSpace(gitIn(t, dir, []byte{}, "mktree"))
	if EmptyTree.String() != want {
		t.Errorf("EmptyTree = %s, git mktree = %s", EmptyTree, want)
	}
}

// sortTestEntries exercises git's tree order: a subtree sorts as if its name
// ended in '/', every other mode (gitlinks included) by its bare name.
func sortTestEntries() (shuffled []TreeEntry, gitOrder []string) {
	id := func(s string) Oid { return HashObject(TypeBlob, []byte(s)) }
	shuffled = []TreeEntry{
		{Mode: ModeFile, Name: "a.b", ID: id("a.b")},
		{Mode: ModeTree, Name: "a", ID: EmptyTree},
		{Mode: "100755", Name: "run.sh", ID: id("run")},
		{Mode: ModeFile, Name: "a-b", ID: id("a-b")},
		{Mode: ModeFile, Name: "m-1", ID: id("m-1")},
		{Mode: ModeFile, Name: "a0", ID: id("a0")},
		{Mode: "160000", Name: "m", ID: id("gitlink")},
		{Mode: ModeTree, Name: "a.c", ID: EmptyTree},
		{Mode: "120000", Name: "link", ID: id("target")},
		{Mode: ModeFile, Name: "Z", ID: id("Z")},
		{Mode: ModeTree, Name: "b", ID: EmptyTree},
		{Mode: ModeFile, Name: "b.txt", ID: id("b.txt")},
		{Mode: ModeFile, Name: "\xc3\xa9t\xc3\xa9", ID: id("utf8")},
	}
	gitOrder = []string{"Z", "a-b", "a.b", "a.c", "a", "a0", "b.txt", "b", "link", "m", "m-1", "run.sh", "\xc3\xa9t\xc3\xa9"}
	return shuffled, gitOrder
}

func TestEncodeTreeMatchesGitMktree(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	entries, order := sortTestEntries()
	var in bytes.Buffer
	for _, e := range entries {
		typ := "blob"
		switch e.Mode {
		case ModeTree:
			typ = "tree"
		case "160000":
			typ = "commit"
		}
		fmt.Fprintf(&in, "%s %s %s\t%s\n", e.Mode, typ, e.ID, e.Name)
	}
	want := mustOid(t, gitIn(t, dir, in.Bytes(), "mktree", "--missing"))
	enc := EncodeTree(entries)
	if got := HashObject(TypeTree, enc); got != want {
		t.Fatalf("EncodeTree hashes to %s, git mktree made %s", got, want)
	}
	raw := catBatch(t, dir, []Oid{want})[want]
	if raw.typ != TypeTree || !bytes.Equal(raw.data, enc) {
		t.Fatalf("EncodeTree bytes differ from git's tree object")
	}
	parsed, err := ParseTree(raw.data)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range parsed {
		names = append(names, e.Name)
	}
	if !reflect.DeepEqual(names, order) {
		t.Fatalf("tree order:\n got %q\nwant %q", names, order)
	}
	// Every entry survives the round trip with its mode and id.
	byName := map[string]TreeEntry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	for _, e := range parsed {
		if byName[e.Name] != e {
			t.Errorf("entry %q: parsed %+v, encoded %+v", e.Name, e, byName[e.Name])
		}
		if e.IsTree() != (e.Mode == ModeTree) {
			t.Errorf("entry %q: IsTree = %v", e.Name, e.IsTree())
		}
	}
	// Re-encoding git's own tree gives back git's bytes.
	if !bytes.Equal(EncodeTree(parsed), raw.data) {
		t.Fatal("EncodeTree(ParseTree(git tree)) differs from the git tree")
	}
	// EncodeTree does not reorder the caller's slice.
	if entries[0].Name != "a.b" {
		t.Fatal("EncodeTree sorted its argument in place")
	}
	if len(EncodeTree(nil)) != 0 {
		t.Fatal("EncodeTree(nil) is not empty")
	}
}

// TestEncodeTreeOrderPairs checks the three-way example of the contract one
// pair at a time against git: "a.b" file, "a" tree, "a-b" file.
func TestEncodeTreeOrderPairs(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	blobID := HashObject(TypeBlob, []byte("x"))
	cases := [][]TreeEntry{
		{{ModeFile, "a.b", blobID}, {ModeTree, "a", EmptyTree}, {ModeFile, "a-b", blobID}},
		{{ModeTree, "a", EmptyTree}, {ModeFile, "a0", blobID}},
		{{ModeTree, "foo", EmptyTree}, {ModeFile, "foo.txt", blobID}, {ModeFile, "foo-bar", blobID}, {ModeTree, "foo bar", EmptyTree}},
	}
	for i, es := range cases {
		var in bytes.Buffer
		for _, e := range es {
			typ := "blob"
			if e.IsTree() {
				typ = "tree"
			}
			fmt.Fprintf(&in, "%s %s %s\t%s\n", e.Mode, typ, e.ID, e.Name)
		}
		want := mustOid(t, gitIn(t, dir, in.Bytes(), "mktree", "--missing"))
		if got := HashObject(TypeTree, EncodeTree(es)); got != want {
			t.Errorf("case %d: EncodeTree hashes to %s, git mktree to %s", i, got, want)
		}
	}
	parsed, err := ParseTree(EncodeTree(cases[0]))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{parsed[0].Name, parsed[1].Name, parsed[2].Name}; !reflect.DeepEqual(got, []string{"a-b", "a.b", "a"}) {
		t.Fatalf("order %q", got)
	}
}

func TestParseTreeRejectsMalformed(t *testing.T) {
	id := bytes.Repeat([]byte{0xab}, 20)
	good := append([]byte("100644 f\x00"), id...)
	if es, err := ParseTree(good); err != nil || len(es) != 1 || es[0].Name != "f" || es[0].Mode != ModeFile {
		t.Fatalf("ParseTree(good) = %+v, %v", es, err)
	}
	for name, b := range map[string][]byte{
		"no space":       []byte("100644"),
		"no nul":         []byte("100644 name"),
		"truncated id":   append([]byte("100644 f\x00"), id[:19]...),
		"second trailer": append(append([]byte{}, good...), "1"...),
	} {
		if _, err := ParseTree(b); err == nil {
			t.Errorf("%s: ParseTree accepted %q", name, b)
		}
	}
	if es, err := ParseTree(nil); err != nil || len(es) != 0 {
		t.Fatalf("ParseTree(nil) = %v, %v", es, err)
	}
}

func TestCommitMatchesGitCommitTree(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	tree := mustOid(t, gitIn(t, dir, []byte{}, "mktree"))
	c1 := mustOid(t, git(t, dir, "commit-tree", tree.String(), "-m", "first"))
	c2 := mustOid(t, git(t, dir, "commit-tree", tree.String(), "-p", c1.String(), "-m", "second", "-m", "body line\nmore"))
	c3 := mustOid(t, git(t, dir, "commit-tree", tree.String(), "-p", c1.String(), "-p", c2.String(), "-m", "merge"))
	objs := catBatch(t, dir, []Oid{c1, c2, c3})
	for _, tc := range []struct {
		id      Oid
		parents []Oid
		msg     string
	}{{c1, nil, "first\n"}, {c2, []Oid{c1}, "second\n\nbody line\nmore\n"}, {c3, []Oid{c1, c2}, "merge\n"}} {
		raw := objs[tc.id].data
		c, payload, err := ParseCommit(raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		if c.Tree != tree || !reflect.DeepEqual(c.Parents, tc.parents) {
			t.Errorf("%s: tree %s parents %v", tc.id, c.Tree, c.Parents)
		}
		if c.Author != "Ada Author <ada@example.com> 1700000000 +0000" || c.Committer != "Cy Committer <cy@example.com> 1700000000 +0000" {
			t.Errorf("%s: author %q committer %q", tc.id, c.Author, c.Committer)
		}
		if string(c.Message) != tc.msg {
			t.Errorf("%s: message %q, want %q", tc.id, c.Message, tc.msg)
		}
		if c.Signature != nil {
			t.Errorf("%s: unsigned commit has a signature %q", tc.id, c.Signature)
		}
		if !bytes.Equal(payload, raw) {
			t.Errorf("%s: payload of an unsigned commit differs from the commit", tc.id)
		}
		if enc := EncodeCommit(c); !bytes.Equal(enc, raw) {
			t.Errorf("%s: EncodeCommit(ParseCommit) =\n%s\nwant\n%s", tc.id, enc, raw)
		}
		if HashObject(TypeCommit, raw) != tc.id {
			t.Errorf("%s: HashObject disagrees with git", tc.id)
		}
	}
}

func TestEncodeCommitReadByGit(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	tree := mustOid(t, gitIn(t, dir, []byte{}, "mktree"))
	first := Commit{
		Tree:      tree,
		Author:    Ident("Ann Writer", "ann@example.com", 1712345678),
		Committer: Ident("bernstein", "bernstein@localhost", 1712345679),
		Message:   []byte("row 0\n\n{\"index\":0}\n"),
	}
	enc1 := EncodeCommit(first)
	id1 := mustOid(t, gitIn(t, dir, enc1, "hash-object", "-t", "commit", "-w", "--stdin"))
	if HashObject(TypeCommit, enc1) != id1 {
		t.Fatalf("HashObject = %s, git = %s", HashObject(TypeCommit, enc1), id1)
	}
	second := first
	second.Parents = []Oid{id1}
	second.Message = []byte("row 1\n\n{\"index\":1}\n")
	enc2 := EncodeCommit(second)
	id2 := mustOid(t, gitIn(t, dir, enc2, "hash-object", "-t", "commit", "-w", "--stdin"))
	git(t, dir, "update-ref", "refs/bernstein/journal/t", id2.String())
	got := git(t, dir, "log", "--format=%H|%P|%T|%an|%ae|%at|%cn|%ce|%ct|%s", "refs/bernstein/journal/t")
	want := fmt.Sprintf("%s|%s|%s|Ann Writer|ann@example.com|1712345678|bernstein|bernstein@localhost|1712345679|row 1\n", id2, id1, tree) +
		fmt.Sprintf("%s||%s|Ann Writer|ann@example.com|1712345678|bernstein|bernstein@localhost|1712345679|row 0\n", id1, tree)
	if got != want {
		t.Fatalf("git log:\n%s\nwant\n%s", got, want)
	}
	fsckStrict(t, dir)
}

// fakeGPG is a gpg.program stand-in: it records the payload git pipes to it
// in $FAKE_GPG_CAPTURE and, when asked to sign, prints a fixed armored
// signature and the status line git waits for.
const fakeGPG = `#!/bin/sh
cat > "$FAKE_GPG_CAPTURE"
for a in "$@"; do
	if [ "$a" = "-bsau" ]; then
		printf '\n[GNUPG:] SIG_CREATED D 22 8 00 1700000000 FAKE\n' >&2
		printf -- '-----BEGIN PGP SIGNATURE-----\n\niHUEABYKAB0WIQRmYWtlZmFrZWZha2VmYWtl\n\n=fake\n-----END PGP SIGNATURE-----\n'
		exit 0
	fi
done
exit 1
`

const fakeSignature = "-----BEGIN PGP SIGNATURE-----\n\niHUEABYKAB0WIQRmYWtlZmFrZWZha2VmYWtl\n\n=fake\n-----END PGP SIGNATURE-----\n"

// gitPayload asks git for the payload it hands to gpg.program to verify a
// signed commit.
func gitPayload(t *testing.T, dir, program string, id Oid) []byte {
	t.Helper()
	capture := filepath.Join(t.TempDir(), "verify-payload")
	// The fake verifier exits 1, so verify-commit fails; only the capture matters.
	runGit(dir, nil, []string{"FAKE_GPG_CAPTURE=" + capture}, "-c", "gpg.program="+program, "verify-commit", id.String())
	b, err := os.ReadFile(capture)
	if err != nil {
		t.Fatalf("git did not run gpg.program for %s: %v", id, err)
	}
	return b
}

func TestSignedCommitPayloadMatchesGit(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	program := filepath.Join(t.TempDir(), "fake-gpg")
	if err := os.WriteFile(program, []byte(fakeGPG), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := mustOid(t, gitIn(t, dir, []byte{}, "mktree"))
	parent := mustOid(t, git(t, dir, "commit-tree", tree.String(), "-m", "parent"))
	signCapture := filepath.Join(t.TempDir(), "sign-payload")
	out, err := runGit(dir, nil, []string{"FAKE_GPG_CAPTURE=" + signCapture},
		"-c", "gpg.program="+program, "-c", "user.signingkey=FAKE",
		"commit-tree", "-S", tree.String(), "-p", parent.String(), "-m", "signed", "-m", "with a body")
	if err != nil {
		t.Fatal(err)
	}
	id := mustOid(t, string(out))
	raw := catBatch(t, dir, []Oid{id})[id].data
	if !bytes.Contains(raw, []byte("\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n")) {
		t.Fatalf("git did not sign the commit as expected:\n%s", raw)
	}
	signed, err := os.ReadFile(signCapture)
	if err != nil {
		t.Fatal(err)
	}

	c, payload, err := ParseCommit(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, signed) {
		t.Fatalf("payload differs from what git signed:\n got %q\nwant %q", payload, signed)
	}
	if v := gitPayload(t, dir, program, id); !bytes.Equal(payload, v) {
		t.Fatalf("payload differs from what git verifies:\n got %q\nwant %q", payload, v)
	}
	if string(c.Signature) != fakeSignature {
		t.Fatalf("Signature = %q", c.Signature)
	}
	if c.Tree != tree || len(c.Parents) != 1 || c.Parents[0] != parent || string(c.Message) != "signed\n\nwith a body\n" {
		t.Fatalf("parsed %+v", c)
	}
	if enc := EncodeCommit(c); !bytes.Equal(enc, raw) {
		t.Fatalf("EncodeCommit of the signed commit:\n%s\nwant\n%s", enc, raw)
	}
	c.Signature = nil
	if enc := EncodeCommit(c); !bytes.Equal(enc, signed) {
		t.Fatalf("EncodeCommit without the signature is not the signed payload")
	}
}

// TestSignedCommitOddHeadersPayload hand-crafts commits with headers git
// keeps (encoding, mergetag with continuation lines) and headers git strips
// from the payload (gpgsig, gpgsig-sha256 and their continuation lines), in
// different positions, and compares ParseCommit's payload with git's.
func TestSignedCommitOddHeadersPayload(t *testing.T) {
	t.Parallel()
	dir := newBare(t)
	program := filepath.Join(t.TempDir(), "fake-gpg")
	if err := os.WriteFile(program, []byte(fakeGPG), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := mustOid(t, gitIn(t, dir, []byte{}, "mktree"))
	sig := " -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n =abcd\n -----END PGP SIGNATURE-----\n"
	head := "tree " + tree.String() + "\n" +
		"author A U Thor <a@example.com> 1700000000 +0100\n" +
		"committer C O Mitter <c@example.com> 1700000000 -0230\n"
	mergetag := "mergetag object " + tree.String() + "\n type tree\n tag v1\n tagger T <t@example.com> 1 +0000\n \n tag message\n"
	bodies := map[string]string{
		"sig last":            head + "encoding ISO-8859-1\n" + mergetag + "gpgsig" + sig + "\nmessage\n",
		"sig before mergetag": head + "gpgsig" + sig + mergetag + "\nmessage\n\n  indented\n",
		"sig and sha256 sig":  head + "gpgsig" + sig + "gpgsig-sha256" + sig + "\nmsg\n",
		"sha256 sig first":    head + "gpgsig-sha256" + sig + "gpgsig" + sig + "\nmsg",
		"empty message":       head + "gpgsig" + sig + "\n",
	}
	for name, body := range bodies {
		id := mustOid(t, gitIn(t, dir, []byte(body), "hash-object", "-t", "commit", "-w", "--literally", "--stdin"))
		want := gitPayload(t, dir, program, id)
		c, payload, err := ParseCommit([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(payload, want) {
			t.Errorf("%s: payload\n got %q\nwant %q", name, payload, want)
		}
		if !strings.HasPrefix(string(c.Signature), "-----BEGIN PGP SIGNATURE-----\n\niQEzBAABCAAdFiEE\n") {
			t.Errorf("%s: Signature %q", name, c.Signature)
		}
		if c.Tree != tree || c.Author != "A U Thor <a@example.com> 1700000000 +0100" {
			t.Errorf("%s: parsed %+v", name, c)
		}
	}
}

// TestSSHSignedCommits signs with real ssh-keygen: a commit git signed
// verifies with ssh-keygen over ParseCommit's payload, and a commit encoded
// here and signed over EncodeCommit passes `git verify-commit`.
func TestSSHSignedCommits(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen not installed")
	}
	dir := newBare(t)
	tmp := t.TempDir()
	key := filepath.Join(tmp, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(tmp, "allowed_signers")
	if err := os.WriteFile(allowed, []byte("cy@example.com namespaces=\"git\" "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := []string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + key, "-c", "gpg.ssh.allowedSignersFile=" + allowed}
	tree := mustOid(t, gitIn(t, dir, []byte{}, "mktree"))

	// git signs, ssh-keygen checks ParseCommit's payload and signature.
	id := mustOid(t, git(t, dir, append(cfg, "commit-tree", "-S", tree.String(), "-m", "signed by git")...))
	git(t, dir, append(cfg, "verify-commit", id.String())...)
	raw := catBatch(t, dir, []Oid{id})[id].data
	c, payload, err := ParseCommit(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(c.Signature, []byte("-----BEGIN SSH SIGNATURE-----\n")) {
		t.Fatalf("Signature = %q", c.Signature)
	}
	sigFile := filepath.Join(tmp, "sig")
	if err := os.WriteFile(sigFile, c.Signature, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(payload []byte) error {
		cmd := exec.Command("ssh-keygen", "-Y", "check-novalidate", "-n", "git", "-s", sigFile)
		cmd.Stdin = bytes.NewReader(payload)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := check(payload); err != nil {
		t.Fatalf("ssh-keygen rejects ParseCommit's payload: %v", err)
	}
	if err := check(append(append([]byte{}, payload...), 'x')); err == nil {
		t.Fatal("ssh-keygen accepted a tampered payload; the check proves nothing")
	}
	if !bytes.Equal(EncodeCommit(c), raw) {
		t.Fatal("EncodeCommit does not reproduce the ssh-signed commit")
	}

	// EncodeCommit's payload signed by ssh-keygen verifies in git.
	mine := Commit{Tree: tree, Parents: []Oid{id}, Author: Ident("bernstein", "cy@example.com", 1700000100),
		Committer: Ident("bernstein", "cy@example.com", 1700000100), Message: []byte("spine 1\n\n{}\n")}
	msg := filepath.Join(tmp, "payload")
	if err := os.WriteFile(msg, EncodeCommit(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-Y", "sign", "-n", "git", "-f", key, msg).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
	}
	if mine.Signature, err = os.ReadFile(msg + ".sig"); err != nil {
		t.Fatal(err)
	}
	enc := EncodeCommit(mine)
	mid := mustOid(t, gitIn(t, dir, enc, "hash-object", "-t", "commit", "-w", "--stdin"))
	if HashObject(TypeCommit, enc) != mid {
		t.Fatal("HashObject disagrees with git for a signed commit")
	}
	git(t, dir, append(cfg, "verify-commit", mid.String())...)
	back, payload2, err := ParseCommit(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Signature, mine.Signature) {
		t.Fatalf("Signature round trip:\n got %q\nwant %q", back.Signature, mine.Signature)
	}
	mine.Signature = nil
	if !bytes.Equal(payload2, EncodeCommit(mine)) {
		t.Fatal("payload of the re-parsed commit is not the unsigned encoding")
	}
	git(t, dir, "update-ref", "refs/bernstein/spine/w", mid.String())
	fsckStrict(t, dir)
}

func TestParseCommitRejectsMalformed(t *testing.T) {
	tree := strings.Repeat("a", 40)
	for name, s := range map[string]string{
		"no separator": "tree " + tree + "\nauthor x\n",
		"no tree":      "author a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nmsg",
		"bad tree":     "tree 1234\n\nmsg",
		"bad parent":   "tree " + tree + "\nparent zz\n\nmsg",
		"empty":        "",
	} {
		if _, _, err := ParseCommit([]byte(s)); err == nil {
			t.Errorf("%s: ParseCommit accepted %q", name, s)
		}
	}
	if _, _, err := ParseCommit([]byte("tree " + tree + "\n\n")); err != nil {
		t.Errorf("minimal commit rejected: %v", err)
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	if errors.Is(ErrMissing, ErrCorrupt) || errors.Is(ErrCorrupt, ErrMissing) {
		t.Fatal("ErrMissing and ErrCorrupt must be distinguishable")
	}
}
