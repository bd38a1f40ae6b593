package gitstore

import (
	"reflect"
	"testing"
)

// TestTreeOfOneMatchesGeneral: the single-file construction gives the
// general construction's id and objects, in the same order, and refuses the
// same paths.
func TestTreeOfOneMatchesGeneral(t *testing.T) {
	id := HashObject(TypeBlob, []byte("x"))
	for _, path := range []string{
		"a", "v1.json", "artifacts/notes/v1.json", "outputs/gate/check/1.log", "a/b/c/d/e",
		"", "/a", "a/", "a//b", "./a", "a/../b", "a/./b", "..",
	} {
		files := map[string]Oid{path: id}
		gotID, gotObjs, gotErr := treeOfOne(path, id)
		wantID, wantObjs, wantErr := treeOfMany(files)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, general %v", path, gotErr, wantErr)
		}
		if gotID != wantID || !reflect.DeepEqual(gotObjs, wantObjs) {
			t.Fatalf("%q: %s %d objects, general %s %d objects", path, gotID, len(gotObjs), wantID, len(wantObjs))
		}
	}
}
