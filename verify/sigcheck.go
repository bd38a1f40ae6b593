package verify

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/bernstein/bernstein/internal/ed25519batch"
	"github.com/bernstein/bernstein/keys"
)

// Commit signatures are checked in batches: each is unarmoured once, its
// claimed key classified against the trust set (once per writer and key),
// and the ed25519 verifications of a batch done together by ed25519batch,
// whose verdicts are crypto/ed25519's. A signature that does not verify
// is checked again the general way, for the exact reason the single check
// gives, so a batch answers as checkSignature answers each of its
// signatures on its own.

// sigJob is one commit signature to check: writer's signature armored over
// payload.
type sigJob struct {
	writer  string
	payload []byte
	armored []byte
	when    int64 // the commit's committer date (Unix seconds): when git says it was signed

	state  sigState
	reason string
}

// keyVerdict is what the trust set says of a writer's signature by one key,
// before the signature itself is checked: final when no check is needed
// (the key is refused, or none is known), else the state and reason a good
// signature gets.
type keyVerdict struct {
	final  bool
	state  sigState
	reason string
}

// sigCache remembers key verdicts for one Env (whose trust set and
// published keys do not change).
type sigCache struct {
	mu       sync.Mutex
	verdicts map[[2]string]keyVerdict
}

func (env *Env) cache() *sigCache {
	env.once.Do(func() { env.sigs = &sigCache{verdicts: map[[2]string]keyVerdict{}} })
	return env.sigs
}

// classify decides what writer's signature by claimed is worth, as
// checkSignature does before it verifies.
func (env *Env) classify(writer string, cs *keys.CommitSignature) keyVerdict {
	c := env.cache()
	k := [2]string{writer, cs.KeyID}
	c.mu.Lock()
	v, ok := c.verdicts[k]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = classifyKey(env, writer, cs.Key)
	c.mu.Lock()
	c.verdicts[k] = v
	c.mu.Unlock()
	return v
}

// noKeyReason is why a signature of a writer no key is known for proves
// nothing: nothing publishes or pins one.
func noKeyReason(writer string) string { return fmt.Sprintf("no key is known for writer %s", writer) }

func classifyKey(env *Env, writer string, claimed ssh.PublicKey) keyVerdict {
	trusted := env.Trust.Trusted(writer)
	if len(trusted) > 0 {
		if !env.Trust.IsTrusted(writer, claimed) {
			return keyVerdict{true, sigBad, fmt.Sprintf("signed by %s, which is not the pinned key of writer %s", ssh.FingerprintSHA256(claimed), writer)}
		}
		return keyVerdict{false, sigTrusted, ""}
	}
	pub := env.Published[writer]
	if len(pub) == 0 {
		return keyVerdict{true, sigNoKey, noKeyReason(writer)}
	}
	if !slices.ContainsFunc(pub, func(k ssh.PublicKey) bool { return bytes.Equal(k.Marshal(), claimed.Marshal()) }) {
		return keyVerdict{true, sigBad, fmt.Sprintf("signed by %s, which is not a key published for writer %s", ssh.FingerprintSHA256(claimed), writer)}
	}
	return keyVerdict{false, sigUnpinned, fmt.Sprintf("writer %s's key is published but not pinned (see 'bernstein keys list')", writer)}
}

// checkSignatures checks every job, as checkSignature would one by one.
func checkSignatures(env *Env, jobs []sigJob) {
	type pending struct {
		job *sigJob
		cs  *keys.CommitSignature
		v   keyVerdict
	}
	var pend []pending
	var items []ed25519batch.Item
	var at []int // index in pend of each item
	msgs := make([]byte, 0, len(jobs)*96)
	for i := range jobs {
		j := &jobs[i]
		if len(j.armored) == 0 {
			j.state, j.reason = sigBad, "commit is not signed"
			continue
		}
		cs, err := keys.ParseCommitSignature(j.armored)
		if err != nil {
			j.state, j.reason = sigBad, err.Error()
			continue
		}
		v := env.classify(j.writer, cs)
		if v.final {
			j.state, j.reason = v.state, v.reason
			continue
		}
		pend = append(pend, pending{j, cs, v})
		key, msg, sig, ok := cs.Ed25519(j.payload, msgs[len(msgs):])
		if !ok {
			continue
		}
		if cap(msgs)-len(msgs) >= len(msg) {
			msgs = msgs[:len(msgs)+len(msg)]
		}
		k, err := ed25519batch.Shared().Key(key)
		if err != nil {
			continue
		}
		items = append(items, ed25519batch.Item{Key: k, Message: msg, Signature: sig})
		at = append(at, len(pend)-1)
	}
	good := make([]bool, len(pend))
	if len(items) > 0 {
		ok := make([]bool, len(items))
		ed25519batch.Shared().Verify(items, ok)
		for n, i := range at {
			good[i] = ok[n]
		}
	}
	for i, p := range pend {
		if !good[i] {
			// Not verified in the batch (or not an ed25519 signature): the
			// general check decides, and gives its reason.
			if err := keys.VerifyCommitSignature(p.job.payload, p.cs, p.cs.Key); err != nil {
				p.job.state, p.job.reason = sigBad, err.Error()
				continue
			}
		}
		p.job.state, p.job.reason = p.v.state, p.v.reason
		if p.v.state == sigTrusted && env.Trust.Restricted(p.job.writer) {
			// valid-after and valid-before, as git verify-commit applies
			// them: at the commit's committer date.
			if why := env.Trust.TrustedAt(p.job.writer, p.cs.Key, p.job.when); why != "" {
				p.job.state, p.job.reason = sigBad, why
			}
		}
	}
}

// CommitTime is the date a commit's committer line gives, in Unix seconds
// (0 when it gives none): the time git verify-commit checks a key's
// valid-after and valid-before against.
func CommitTime(committer string) int64 {
	i := strings.LastIndexByte(committer, '>')
	if i < 0 {
		return 0
	}
	f := strings.Fields(committer[i+1:])
	if len(f) == 0 {
		return 0
	}
	t, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0
	}
	return t
}
