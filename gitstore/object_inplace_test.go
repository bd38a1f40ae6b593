package gitstore

import (
	"bytes"
	"reflect"
	"testing"
)

// TestParseCommitInPlaceMatches: parsing in place gives what ParseCommit
// gives, for signed, unsigned and multi-signature commits.
func TestParseCommitInPlaceMatches(t *testing.T) {
	sig := []byte("-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\nAAAA\n-----END SSH SIGNATURE-----\n")
	base := Commit{Tree: EmptyTree, Author: "a <a@x> 1 +0000", Committer: "c <c@x> 2 +0000", Message: []byte("summary\n\n{\"v\":1}\n")}
	var cases [][]byte
	for _, parents := range [][]Oid{nil, {EmptyTree}, {EmptyTree, HashObject(TypeBlob, nil)}} {
		for _, s := range [][]byte{nil, sig} {
			c := base
			c.Parents, c.Signature = parents, s
			cases = append(cases, EncodeCommit(c))
		}
	}
	// Another signature header after gpgsig, and one before it.
	signed := EncodeCommit(Commit{Tree: EmptyTree, Author: base.Author, Committer: base.Committer, Signature: sig, Message: []byte("m\n")})
	cases = append(cases,
		bytes.Replace(signed, []byte("\n\nm\n"), []byte("\ngpgsig-sha256 x\n y\n\nm\n"), 1),
		bytes.Replace(signed, []byte("gpgsig "), []byte("gpgsig-sha256 z\ngpgsig "), 1),
		[]byte("tree "+EmptyTree.String()+"\n\n"),
		[]byte("no separator"),
	)
	for _, data := range cases {
		want, wantPayload, wantErr := ParseCommit(bytes.Clone(data))
		got, gotPayload, gotErr := ParseCommitInPlace(bytes.Clone(data))
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: error %v, ParseCommit %v", data, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) || !bytes.Equal(gotPayload, wantPayload) {
			t.Fatalf("%q:\nin place %+v %q\nParseCommit %+v %q", data, got, gotPayload, want, wantPayload)
		}
	}
}
