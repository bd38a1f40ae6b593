package main

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/gitstore"
	"github.com/bernstein/bernstein/keys"
	"github.com/bernstein/bernstein/refs"
)

// phaseCosts are the write path's durable steps timed alone, through the
// library's own packages, with objects shaped like one post's: what
// tx.commit does after the records are built.
type phaseCosts struct {
	pack time.Duration // gitstore.Repo.WritePack of 7 objects
	refs time.Duration // refs.Transactor.Apply moving 3 refs
	sign time.Duration // 2 SSH commit signatures (spine, audit)
}

// measurePhases runs n post-shaped commits on a fresh repository: build and
// sign the objects, write them as one pack, move three refs.
func (b *bench) measurePhases(n, size int) (phaseCosts, error) {
	dir, err := b.mkrepoDir("phases-")
	if err != nil {
		return phaseCosts{}, err
	}
	if _, err := bernstein.Init(bernstein.Options{Repo: dir, Home: b.home}, benchWriter); err != nil {
		return phaseCosts{}, fmt.Errorf("init: %w", err)
	}
	id, err := keys.Load(b.home)
	if err != nil {
		return phaseCosts{}, err
	}
	gitDir := filepath.Join(dir, ".git")
	repo, err := gitstore.Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		return phaseCosts{}, err
	}
	defer repo.Close()
	tx := &refs.Transactor{GitDir: gitDir}

	refJ, refS, refA := refs.Journal(benchTask), refs.Spine(benchWriter), refs.Audit(benchWriter)
	oldA, err := (refs.Reader{Dir: gitDir}).ReadOptional(refA) // Init wrote the first audit entry
	if err != nil {
		return phaseCosts{}, err
	}
	var headJ, headS gitstore.Oid
	headA := oldA
	var keyEntries []gitstore.TreeEntry
	var packs, moves, signs []time.Duration
	for i := 0; i < n; i++ {
		now := time.Now().Unix()
		ident := gitstore.Ident(benchAgent, benchAgent+"@bernstein", now)
		var objs []gitstore.Object
		add := func(t gitstore.ObjectType, data []byte) gitstore.Oid {
			o := gitstore.NewObject(t, data)
			objs = append(objs, o)
			return o.ID
		}
		payload := canonical(map[string]any{"v": 1, "type": "report", "body": bodyOf("phases", i, size)})
		blob := add(gitstore.TypeBlob, payload)
		keyEntries = append(keyEntries, gitstore.TreeEntry{Mode: gitstore.ModeFile, Name: fmt.Sprintf("v%d.json", i+1), ID: blob})
		keyTree := add(gitstore.TypeTree, gitstore.EncodeTree(keyEntries))
		artTree := add(gitstore.TypeTree, gitstore.EncodeTree([]gitstore.TreeEntry{{Mode: gitstore.ModeTree, Name: "k0", ID: keyTree}}))
		root := add(gitstore.TypeTree, gitstore.EncodeTree([]gitstore.TreeEntry{{Mode: gitstore.ModeTree, Name: "artifacts", ID: artTree}}))
		rec := payload // a record-sized message body
		commit := func(tree, parent gitstore.Oid, signed bool) (gitstore.Oid, time.Duration, error) {
			c := gitstore.Commit{Tree: tree, Author: ident, Committer: ident, Message: message(fmt.Sprintf("post %d", i), rec)}
			if !parent.IsZero() {
				c.Parents = []gitstore.Oid{parent}
			}
			var took time.Duration
			if signed {
				t0 := time.Now()
				sig, err := id.SignCommit(gitstore.EncodeCommit(c))
				took = time.Since(t0)
				if err != nil {
					return gitstore.ZeroOid, 0, err
				}
				c.Signature = sig
			}
			return add(gitstore.TypeCommit, gitstore.EncodeCommit(c)), took, nil
		}
		newJ, _, err := commit(root, headJ, false)
		if err != nil {
			return phaseCosts{}, err
		}
		newS, s1, err := commit(gitstore.EmptyTree, headS, true)
		if err != nil {
			return phaseCosts{}, err
		}
		newA, s2, err := commit(gitstore.EmptyTree, headA, true)
		if err != nil {
			return phaseCosts{}, err
		}
		signs = append(signs, s1+s2)
		if i == 0 && !repo.HasEmptyTree() {
			objs = append(objs, gitstore.NewObject(gitstore.TypeTree, nil))
		}
		t0 := time.Now()
		if _, err := repo.WritePack(objs); err != nil {
			return phaseCosts{}, fmt.Errorf("write pack: %w", err)
		}
		packs = append(packs, time.Since(t0))
		t0 = time.Now()
		_, err = tx.Apply([]refs.Update{{Ref: refJ, Old: headJ, New: newJ}, {Ref: refS, Old: headS, New: newS}, {Ref: refA, Old: headA, New: newA}})
		moves = append(moves, time.Since(t0))
		if err != nil {
			return phaseCosts{}, fmt.Errorf("move refs: %w", err)
		}
		headJ, headS, headA = newJ, newS, newA
	}
	if err := checkCounts(dir, map[string]int{refJ: n, refS: n}); err != nil {
		return phaseCosts{}, err
	}
	if err := fsck(dir); err != nil {
		return phaseCosts{}, err
	}
	return phaseCosts{pack: percentile(packs, 50), refs: percentile(moves, 50), sign: percentile(signs, 50)}, nil
}

// cpuTimes reads the CPU time (user+sys) of this process and of its reaped
// children.
func cpuTimes() (self, children time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return self, children
}

// processCPU is the CPU time of a finished child (and the children it reaped).
func processCPU(ps interface{ SysUsage() any }) time.Duration {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return 0
}
