package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bernstein/bernstein/refs"
)

// The git plumbing baseline writes, per post, what bernstein writes: the
// payload blob, three trees (the key's versions, artifacts/, the root), the
// journal commit (parent: the previous journal commit; message: summary and
// a canonical row), a spine commit and an audit commit on the empty tree with
// records of similar size (unsigned: bernstein's carry an SSH signature), and
// moves the three refs in one `git update-ref --stdin` transaction with
// old-value checks. Every git process runs with core.fsync=all and
// core.fsyncMethod=fsync. Git does not fsync directories after its renames;
// bernstein does, so the baseline is, if anything, a little less durable.

const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
const zeroOid = "0000000000000000000000000000000000000000"

type plumbing struct {
	b      *bench
	probe  bool // wrap each git process to read its peak RSS
	gitDir string
	env    []string
	maxRSS int64
	cpu    time.Duration
}

func (p *plumbing) git(stdin []byte, args ...string) (string, error) {
	full := append([]string{"-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync"}, args...)
	cmd, rss := p.b.command(p.probe, "git", full...)
	cmd.Env = p.env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.ProcessState != nil {
		if kib := rss(); kib > p.maxRSS {
			p.maxRSS = kib
		}
		p.cpu += processCPU(cmd.ProcessState)
	}
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// oid runs git and returns the object id it prints.
func (p *plumbing) oid(stdin []byte, args ...string) (string, error) {
	out, err := p.git(stdin, args...)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	if len(id) != 40 {
		return "", fmt.Errorf("git %s printed %q, not an object id", args[0], id)
	}
	return id, nil
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// canonical marshals v (maps only) with sorted keys and no HTML escaping,
// close enough to RFC 8785 for records of the same size.
func canonical(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func message(summary string, rec []byte) []byte {
	return append(append([]byte(summary+"\n\n"), rec...), '\n')
}

// baselinePosts runs n posts with git plumbing commands on a fresh
// repository. A probe run wraps each git process in GNU time to read its
// peak RSS.
func (b *bench) baselinePosts(n, keys, size int, probe bool) (postRun, error) {
	dir, err := b.mkrepoDir("baseline-")
	if err != nil {
		return postRun{}, err
	}
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		return postRun{}, fmt.Errorf("git init: %v: %s", err, out)
	}
	p := &plumbing{b: b, probe: probe, gitDir: filepath.Join(dir, ".git")}
	p.env = cleanEnv("GIT_DIR="+p.gitDir,
		"GIT_AUTHOR_NAME=agent-1", "GIT_AUTHOR_EMAIL=agent-1@bernstein",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@bernstein")
	// Setup, untimed: the empty tree, as bernstein stores it too.
	if id, err := p.oid([]byte{}, "hash-object", "-w", "-t", "tree", "--stdin"); err != nil {
		return postRun{}, err
	} else if id != emptyTree {
		return postRun{}, fmt.Errorf("empty tree is %s", id)
	}
	p.maxRSS, p.cpu = 0, 0

	journalRef, spineRef, auditRef := refs.Journal(benchTask), refs.Spine(benchWriter), refs.Audit(benchWriter)
	headJ, headS, headA := zeroOid, zeroOid, zeroOid
	prevRow, prevEntry, prevMAC := "", "", ""
	versions := map[string][]string{} // key -> blob ids of v1..vN
	spineHashes := map[string]string{}
	keyTrees := map[string]string{} // key -> its latest tree
	macKey := []byte("bench-hmac-key")
	run := postRun{posts: n, lat: make([]time.Duration, 0, n)}

	post := func(i int) error {
		key := keyOf(i, keys)
		payload := canonical(map[string]any{"v": 1, "type": "report", "body": bodyOf("baseline", i, size)})
		blob, err := p.oid(payload, "hash-object", "-w", "--stdin")
		if err != nil {
			return err
		}
		versions[key] = append(versions[key], blob)
		version := len(versions[key])

		var kt bytes.Buffer
		for v, id := range versions[key] {
			fmt.Fprintf(&kt, "100644 blob %s\tv%d.json\n", id, v+1)
		}
		keyTree, err := p.oid(kt.Bytes(), "mktree")
		if err != nil {
			return err
		}
		// artifacts/: one subtree per key. Only this key's tree changed, but
		// mktree needs them all; keep the others' latest trees.
		keyTrees[key] = keyTree
		names := make([]string, 0, len(keyTrees))
		for k := range keyTrees {
			names = append(names, k)
		}
		sort.Strings(names)
		var at bytes.Buffer
		for _, k := range names {
			fmt.Fprintf(&at, "040000 tree %s\t%s\n", keyTrees[k], k)
		}
		artTree, err := p.oid(at.Bytes(), "mktree")
		if err != nil {
			return err
		}
		root, err := p.oid([]byte(fmt.Sprintf("040000 tree %s\tartifacts\n", artTree)), "mktree")
		if err != nil {
			return err
		}

		contentHash := sha(payload)
		entry := canonical(map[string]any{"v": 1, "writer": benchWriter, "seq": i, "prev": prevEntry, "kind": "artifact",
			"task_id": benchTask, "key": key, "version": version, "content_hash": contentHash,
			"prev_version_hash": spineHashes[key], "journal_index": i, "actor": benchAgent})
		entryHash := sha(entry)
		row := canonical(map[string]any{"v": 1, "kind": "artifact_posted", "task_id": benchTask, "index": i, "prev": prevRow, "actor": benchAgent,
			"data": map[string]any{"key": key, "artifact_type": "report", "version": version, "content_hash": contentHash, "blob": blob,
				"size": len(payload), "link_kind": "", "prev_version_hash": spineHashes[key], "spine_entry_hash": entryHash}})
		audit := map[string]any{"v": 1, "writer": benchWriter, "seq": i + 1, "event": "artifact.posted", "actor": benchAgent,
			"task_id": benchTask, "resource": entryHash, "prev_hmac": prevMAC,
			"details": map[string]any{"key": key, "version": version, "content_hash": contentHash, "journal_index": i}}
		mac := hmac.New(sha256.New, macKey)
		mac.Write(canonical(audit))
		audit["hmac"] = hex.EncodeToString(mac.Sum(nil))
		auditBytes := canonical(audit)

		commit := func(tree, parent string, msg []byte) (string, error) {
			args := []string{"commit-tree", tree}
			if parent != zeroOid {
				args = append(args, "-p", parent)
			}
			return p.oid(msg, append(args, "-F", "-")...)
		}
		newJ, err := commit(root, headJ, message(fmt.Sprintf("artifact_posted %s v%d", key, version), row))
		if err != nil {
			return err
		}
		newS, err := commit(emptyTree, headS, message(fmt.Sprintf("artifact %s/%s v%d", benchTask, key, version), entry))
		if err != nil {
			return err
		}
		newA, err := commit(emptyTree, headA, message("artifact.posted "+benchTask, auditBytes))
		if err != nil {
			return err
		}
		var tx bytes.Buffer
		tx.WriteString("start\n")
		fmt.Fprintf(&tx, "update %s %s %s\n", journalRef, newJ, headJ)
		fmt.Fprintf(&tx, "update %s %s %s\n", spineRef, newS, headS)
		fmt.Fprintf(&tx, "update %s %s %s\n", auditRef, newA, headA)
		tx.WriteString("prepare\ncommit\n")
		out, err := p.git(tx.Bytes(), "update-ref", "--stdin")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "commit: ok") {
			return fmt.Errorf("git update-ref --stdin said %q", strings.TrimSpace(out))
		}
		headJ, headS, headA = newJ, newS, newA
		prevRow, prevEntry, prevMAC = sha(row), entryHash, audit["hmac"].(string)
		spineHashes[key] = entryHash
		return nil
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		err := post(i)
		run.lat = append(run.lat, time.Since(t0))
		if err != nil {
			return run, fmt.Errorf("baseline post %d: %w", i, err)
		}
	}
	run.elapsed = time.Since(start)
	run.maxRSS, run.cpuKids = p.maxRSS, p.cpu
	want := map[string]int{journalRef: n, spineRef: n, auditRef: n}
	if err := checkCounts(dir, want); err != nil {
		return run, err
	}
	if out, err := gitIn(dir, nil, "show", journalRef+":"+fmt.Sprintf("artifacts/%s/v%d.json", keyOf(n-1, keys), (n-1)/keys+1)); err != nil || !strings.Contains(out, `"type":"report"`) {
		return run, fmt.Errorf("baseline: last version not readable: %v %q", err, out)
	}
	return run, fsck(dir)
}
