package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/agenttest"

	"golang.org/x/crypto/ssh"
)

// The attest section (issue 23): what signing through ssh-agent and what
// attesting cost per post, against the post of a writer whose key is a
// file, in the same run. Modes, each on a fresh repository per round, in
// rotated order, N sequential library posts each:
//   - file key: the writer's Ed25519 key in BERNSTEIN_HOME (the baseline);
//   - agent ed25519: the same kind of key held by a real ssh-agent;
//   - agent token: an ECDSA P-256 key on a SoftHSM token, loaded into the
//     agent with ssh-add -s (every signature goes through PKCS#11);
//   - post + attest: the file-key post followed by artifact attest --bundle
//     of the version it made (Store.AttestArtifact: re-verification,
//     statement, DSSE signature, bundle).

var flagAttestPosts = flag.Int("attest-posts", 100, "attest: sequential posts per mode and round")

func runAttest(b *bench) error {
	n := *flagAttestPosts
	var ag *agenttest.Agent
	var edKey, tokenKey string
	if m := agenttest.Missing(); m == "" {
		// A short folder: a socket path is at most 108 bytes.
		dir, err := os.MkdirTemp("", "bench-agent")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if ag, err = agenttest.Start(dir); err != nil {
			return err
		}
		defer ag.Stop()
		if edKey, err = ag.AddKeyFile("bench-ed25519", "ed25519"); err != nil {
			return err
		}
		if tokenKey, err = ag.AddTokenKey("bench"); err != nil {
			return err
		}
		os.Setenv("SSH_AUTH_SOCK", ag.Sock)
		defer os.Unsetenv("SSH_AUTH_SOCK")
	} else {
		b.printf("  (no agent modes: %s missing; scripts/deps.sh installs softhsm2 and opensc)\n", m)
	}
	type mode struct {
		name  string
		key   string // "" file key, else the agent's key line
		attst bool
		w     *attestWriter
		post  stats // seconds per post (with its attestation)
		sig   stats // seconds per commit signature
		ratio stats // per-post time over the file-key post's, pair by pair
	}
	modes := []*mode{{name: "file key"}, {name: "post + attest", attst: true}}
	if ag != nil {
		modes = append(modes, &mode{name: "agent ed25519", key: edKey}, &mode{name: "agent token (ECDSA, PKCS#11)", key: tokenKey})
	}
	b.printf("  %d rounds; each: a fresh repository per mode, then %d library posts (Store.Post, 200 B reports) per mode,\n", *flagRounds, n)
	b.printf("  the modes taking turns post by post (rotated), each post timed and divided by the file-key post next to it;\n")
	b.printf("  then 200 commit signatures (Identity.SignCommit) per mode. Medians.\n\n")
	attestOnly := stats{}
	for r := 0; r < *flagRounds; r++ {
		for _, m := range modes {
			w, err := b.newAttestWriter(m.key)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			m.w = w
		}
		for i := 0; i < n; i++ {
			per := make([]float64, len(modes))
			for k := range modes {
				j := (k + i + r) % len(modes)
				m := modes[j]
				d, a, err := m.w.post(i, m.attst)
				if err != nil {
					return fmt.Errorf("%s: %w", m.name, err)
				}
				per[j] = d.Seconds()
				m.post.add(d.Seconds())
				if m.attst {
					attestOnly.add(a.Seconds())
				}
			}
			for j, m := range modes {
				m.ratio.add(per[j] / per[0])
			}
		}
		for _, m := range modes {
			if err := m.w.check(n); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			d, err := m.w.signatures(200)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			m.sig.add(d.Seconds())
			m.w.close()
		}
	}
	for _, m := range modes {
		b.printf("  %-30s post %8.3f ms  %5.2fx the file-key post (pairs)   commit signature %8.1f us\n",
			m.name, m.post.median()*1e3, m.ratio.median(), m.sig.median()*1e6)
	}
	b.printf("  %-30s      %8.3f ms  (Store.AttestArtifact after each post: re-verify the task, sign, bundle)\n", "attest alone", attestOnly.median()*1e3)
	b.printf("  A post signs three commits (journal row, spine entry, audit entry): the agent's cost per post is three\n")
	b.printf("  times the difference of the signature times; the rest of a post is fsyncs, which the disk decides.\n")
	base := modes[0]
	for _, m := range modes[1:] {
		b.summary(m.name+" post / file-key post", fmt.Sprintf("%.2f ms", m.post.median()*1e3), fmt.Sprintf("%.2f ms", base.post.median()*1e3), fmt.Sprintf("%.2fx", m.ratio.median()), "", false)
	}
	return nil
}

// attestWriter is one mode's repository and store.
type attestWriter struct {
	dir string
	s   *bernstein.Store
	tok string
}

// newAttestWriter makes a fresh repository whose writer signs with
// agentKey (an authorized-key line held by the agent) or, "", a key file.
func (b *bench) newAttestWriter(agentKey string) (*attestWriter, error) {
	dir, err := b.mkrepoDir("attest-")
	if err != nil {
		return nil, err
	}
	opts := bernstein.Options{Repo: filepath.Join(dir, "work"), Home: filepath.Join(dir, "home")}
	if agentKey == "" {
		_, err = bernstein.Init(opts, benchWriter)
	} else {
		pub, _, _, _, perr := ssh.ParseAuthorizedKey([]byte(agentKey))
		if perr != nil {
			return nil, perr
		}
		_, err = bernstein.InitAgent(opts, benchWriter, ssh.FingerprintSHA256(pub))
	}
	if err != nil {
		return nil, err
	}
	if err := commitWorkTree(opts.Repo, "work"); err != nil {
		return nil, err
	}
	w := &attestWriter{dir: dir}
	if w.s, err = bernstein.Open(opts); err != nil {
		return nil, err
	}
	if id, err := w.s.Identity(); err != nil || id.InAgent() != (agentKey != "") {
		return nil, fmt.Errorf("identity: %v", err)
	}
	if _, err := w.s.CreateTask(bernstein.TaskSpec{ID: "attest-1", Title: "attest benchmark"}); err != nil {
		return nil, err
	}
	if w.tok, err = w.s.Claim("attest-1", "bench-agent"); err != nil {
		return nil, err
	}
	return w, nil
}

// post posts version i (and attests it when attst): the time of both, and
// of the attestation alone.
func (w *attestWriter) post(i int, attst bool) (total, attest time.Duration, err error) {
	t0 := time.Now()
	res, err := w.s.Post(bernstein.PostRequest{Task: "attest-1", Key: fmt.Sprintf("k%d", i%8), Agent: "bench-agent", ClaimToken: w.tok,
		Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("%0200d", i)}})
	if err != nil {
		return 0, 0, err
	}
	if attst {
		a0 := time.Now()
		a, err := w.s.AttestArtifact("attest-1", res.Key, res.Version)
		if err != nil {
			return 0, 0, err
		}
		if len(a.Bundle) == 0 {
			return 0, 0, fmt.Errorf("attestation of %s v%d has no bundle", res.Key, res.Version)
		}
		attest = time.Since(a0)
	}
	return time.Since(t0), attest, nil
}

// check verifies that every version verifies (so every agent signature did).
func (w *attestWriter) check(n int) error {
	rep, err := w.s.Artifacts("attest-1")
	if err != nil {
		return err
	}
	if len(rep.Versions) != n || !rep.Verified() {
		return fmt.Errorf("%d versions, verified %v: %s", len(rep.Versions), rep.Verified(), rep.Reason())
	}
	return nil
}

// signatures times n commit signatures of the writer's key and returns the
// time of one.
func (w *attestWriter) signatures(n int) (time.Duration, error) {
	id, err := w.s.Identity()
	if err != nil {
		return 0, err
	}
	msg := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor b <b@bernstein> 0 +0000\n\nbench\n")
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := id.SignCommit(msg); err != nil {
			return 0, err
		}
	}
	return time.Since(t0) / time.Duration(n), nil
}

func (w *attestWriter) close() {
	w.s.Close()
	os.RemoveAll(w.dir)
}
