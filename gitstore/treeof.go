package gitstore

import (
	"fmt"
	"strings"
)

// TreeOf builds the tree that holds exactly files (slash-separated path ->
// blob id) and returns its id with every tree object it needs, root last.
// It is pure: a writer stores the objects, a verifier recomputes the id and
// compares it with a commit's tree, so one hash comparison proves that the
// commit holds these files and nothing else.
func TreeOf(files map[string]Oid) (Oid, []Object, error) {
	if len(files) == 0 {
		return EmptyTree, nil, nil
	}
	if len(files) == 1 {
		for path, id := range files {
			return treeOfOne(path, id)
		}
	}
	return treeOfMany(files)
}

// treeOfOne is TreeOf for a single file (every row stores at most one): a
// chain of one-entry trees, built from the leaf up, the same objects in the
// same order as the general construction gives.
func treeOfOne(path string, id Oid) (Oid, []Object, error) {
	parts := strings.Split(path, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return ZeroOid, nil, fmt.Errorf("tree path %q has an empty or relative component", path)
		}
	}
	objs := make([]Object, 0, len(parts))
	mode := ModeFile
	for i := len(parts) - 1; i >= 0; i-- {
		o := NewObject(TypeTree, EncodeTree([]TreeEntry{{Mode: mode, Name: parts[i], ID: id}}))
		objs = append(objs, o)
		id, mode = o.ID, ModeTree
	}
	return id, objs, nil
}

func treeOfMany(files map[string]Oid) (Oid, []Object, error) {
	type dir struct {
		files map[string]Oid
		subs  map[string]*dir
	}
	newDir := func() *dir { return &dir{files: map[string]Oid{}, subs: map[string]*dir{}} }
	root := newDir()
	for path, id := range files {
		parts := strings.Split(path, "/")
		d := root
		for i, p := range parts {
			if p == "" || p == "." || p == ".." {
				return ZeroOid, nil, fmt.Errorf("tree path %q has an empty or relative component", path)
			}
			if i == len(parts)-1 {
				if _, clash := d.subs[p]; clash {
					return ZeroOid, nil, fmt.Errorf("tree path %q is both a file and a directory", path)
				}
				d.files[p] = id
				break
			}
			if _, clash := d.files[p]; clash {
				return ZeroOid, nil, fmt.Errorf("tree path %q is both a file and a directory", path)
			}
			sub, ok := d.subs[p]
			if !ok {
				sub = newDir()
				d.subs[p] = sub
			}
			d = sub
		}
	}
	var objs []Object
	var build func(d *dir) Oid
	build = func(d *dir) Oid {
		es := make([]TreeEntry, 0, len(d.files)+len(d.subs))
		for name, id := range d.files {
			es = append(es, TreeEntry{Mode: ModeFile, Name: name, ID: id})
		}
		for name, sub := range d.subs {
			es = append(es, TreeEntry{Mode: ModeTree, Name: name, ID: build(sub)})
		}
		o := NewObject(TypeTree, EncodeTree(es))
		objs = append(objs, o)
		return o.ID
	}
	return build(root), objs, nil
}
