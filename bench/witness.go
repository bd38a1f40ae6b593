package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/witnesstest"
	"github.com/bernstein/bernstein/keys"
)

// The witness section (issue 24): what witnesses add to a push (signing a
// checkpoint of the writer's log and having litewitness cosign it with a
// consistency proof) and to a fetch (checking each writer's log against its
// checkpoint, its cosignatures and this host's memory), against the same
// push and fetch without witnesses, in the same run.

var (
	flagWitnessPosts = flag.Int("witness-posts", 2000, "witness: artifact posts (spine entries) before the rounds")
	flagWitnessNew   = flag.Int("witness-new", 10, "witness: new posts per round")
)

func init() { testing.Init() } // litewitness runs under testing.Benchmark (witnesstest takes a testing.TB)

// witnessSide is one writer repository with its bare remote and a reader
// that fetches from it.
type witnessSide struct {
	name            string
	dir, bare       string
	s               *bernstein.Store
	token           string
	reader          *bernstein.Store
	readerDir, home string
}

func (b *bench) witnessSide(name string, posts int) (*witnessSide, error) {
	root, err := b.mkrepoDir("witness-" + name + "-")
	if err != nil {
		return nil, err
	}
	w := &witnessSide{name: name, dir: filepath.Join(root, "work"), bare: filepath.Join(root, "remote.git"), readerDir: filepath.Join(root, "reader"), home: filepath.Join(root, "reader-home")}
	opts := bernstein.Options{Repo: w.dir, Home: b.home}
	if _, err := bernstein.Init(opts, benchWriter); err != nil {
		return nil, err
	}
	if err := commitWorkTree(w.dir, "work"); err != nil {
		return nil, err
	}
	if _, err := gitIn(w.dir, nil, "init", "-q", "--bare", w.bare); err != nil {
		return nil, err
	}
	if _, err := gitIn(w.dir, nil, "remote", "add", "origin", "file://"+w.bare); err != nil {
		return nil, err
	}
	if _, err := bernstein.RemoteSetup(opts, "origin"); err != nil {
		return nil, err
	}
	if w.s, err = bernstein.Open(opts); err != nil {
		return nil, err
	}
	if _, err := w.s.CreateTask(bernstein.TaskSpec{ID: "w-1", Title: "witness benchmark"}); err != nil {
		return nil, err
	}
	if w.token, err = w.s.Claim("w-1", "bench-agent"); err != nil {
		return nil, err
	}
	return w, w.post(posts)
}

func (w *witnessSide) post(n int) error {
	return parallel(n, *flagBuildWorkers, func(i int) error {
		_, err := w.s.Post(bernstein.PostRequest{Task: "w-1", Key: fmt.Sprintf("k%d", i%16), Agent: "bench-agent", ClaimToken: w.token,
			Payload: artifact.Payload{Type: artifact.TypeReport, Body: fmt.Sprintf("post %d at %d", i, time.Now().UnixNano())}})
		return err
	})
}

func (w *witnessSide) clone(signers string) error {
	_, err := bernstein.Clone("file://"+w.bare, w.readerDir, bernstein.Options{Home: w.home, AllowedSigners: signers})
	if err != nil {
		return err
	}
	w.reader, err = bernstein.Open(bernstein.Options{Repo: w.readerDir, Home: w.home, AllowedSigners: signers})
	return err
}

// configure gives home the witness for the repository of s.
func configureWitness(home string, s *bernstein.Store, url, key string) error {
	l, err := s.Witnesses()
	if err != nil {
		return err
	}
	p := filepath.Join(home, "witnesses", filepath.Base(l.Config))
	b, _ := json.Marshal(map[string]any{"quorum": 1, "witnesses": []map[string]string{{"name": "w1", "url": url, "key": key}}})
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o600)
}

func runWitness(b *bench) error {
	if err := flag.Set("test.benchtime", "1x"); err != nil {
		return err
	}
	var err error
	res := testing.Benchmark(func(tb *testing.B) { err = b.witnessRounds(tb) })
	if err == nil && res.N == 0 {
		err = errors.New("litewitness did not start (see above)")
	}
	return err
}

func (b *bench) witnessRounds(tb *testing.B) error {
	n, k := *flagWitnessPosts, *flagWitnessNew
	b.printf("  workload: two repositories of one writer, each a task with %d posts (spine entries) and a file:// bare remote;\n", n)
	b.printf("  one has litewitness (filippo.io/torchwood v0.6.1, on 127.0.0.1, its key in ssh-agent) configured with quorum 1,\n")
	b.printf("  the other none. Per round, %d new posts to each, then `Store.Push` of each (the witnessed one signs a checkpoint,\n", k)
	b.printf("  has it cosigned with a consistency proof and pushes it), then `Store.Fetch` by a reader of each (the witnessed\n")
	b.printf("  reader checks the log against the checkpoint, its cosignature and its memory), then 3 reads of the task by\n")
	b.printf("  each reader (Store.Artifacts: the witnessed one checks the log on every read); rotated order; medians\n\n")
	t0 := time.Now()
	wit, err := b.witnessSide("on", n)
	if err != nil {
		return err
	}
	plain, err := b.witnessSide("off", n)
	if err != nil {
		return err
	}
	id, err := keys.Load(b.home)
	if err != nil {
		return err
	}
	signers := filepath.Join(b.tmp, "witness.signers")
	if err := os.WriteFile(signers, []byte(keys.AllowedSignersLine(benchWriter, id.AuthorizedKey())+"\n"), 0o644); err != nil {
		return err
	}
	defer wit.s.Close()
	defer plain.s.Close()
	b.printf("  built both in %s\n", time.Since(t0).Round(10*time.Millisecond))
	lw := witnesstest.Start(tb)
	line, err := wit.s.WitnessLog()
	if err != nil {
		return err
	}
	lw.AddLog(tb, line.Origin, line.VerifierKey)
	if _, err := wit.s.AddWitness(bernstein.Witness{Name: "w1", URL: lw.URL(), Key: lw.VerifierKey()}); err != nil {
		return err
	}
	for _, side := range []*witnessSide{wit, plain} {
		t0 := time.Now()
		if _, err := side.s.Push("origin"); err != nil {
			return fmt.Errorf("first push (%s): %w", side.name, err)
		}
		b.printf("  first push of %d posts, witnesses %s: %s\n", n, side.name, ms(time.Since(t0)))
		if side == wit {
			if err := configureWitness(side.home, side.s, lw.URL(), lw.VerifierKey()); err != nil {
				return err
			}
		}
		if err := side.clone(signers); err != nil {
			return fmt.Errorf("clone (%s): %w", side.name, err)
		}
		defer side.reader.Close()
	}
	return b.witnessMeasure(wit, plain, k)
}

func (b *bench) witnessMeasure(wit, plain *witnessSide, k int) error {
	push, fetch, read := map[string]durations{}, map[string]durations{}, map[string]durations{}
	for r := 0; r < *flagRounds; r++ {
		sides := []*witnessSide{wit, plain}
		if r%2 == 1 {
			sides[0], sides[1] = plain, wit
		}
		for _, side := range sides {
			if err := side.post(k); err != nil {
				return err
			}
			t0 := time.Now()
			if _, err := side.s.Push("origin"); err != nil {
				return fmt.Errorf("push (%s): %w", side.name, err)
			}
			push[side.name] = append(push[side.name], time.Since(t0))
			t0 = time.Now()
			res, err := side.reader.Fetch("origin")
			if err != nil {
				return fmt.Errorf("fetch (%s): %w", side.name, err)
			}
			fetch[side.name] = append(fetch[side.name], time.Since(t0))
			if side == wit && (len(res.Logs) != 1 || res.Logs[0].State != "cosigned") {
				return fmt.Errorf("the witnessed reader's fetch found the log %+v, want cosigned", res.Logs)
			}
			// A read of the task, as artifact list reads it: the witnessed
			// reader checks the writer's log against its checkpoint and its
			// memory on every read.
			for range 3 {
				t0 = time.Now()
				if _, err := side.reader.Artifacts("w-1"); err != nil {
					return fmt.Errorf("read (%s): %w", side.name, err)
				}
				read[side.name] = append(read[side.name], time.Since(t0))
			}
		}
	}
	for _, m := range []struct {
		what string
		d    map[string]durations
	}{{fmt.Sprintf("push of %d new posts", k), push}, {fmt.Sprintf("fetch of %d new posts", k), fetch}, {"read of the task (Store.Artifacts)", read}} {
		on, off := m.d["on"].median(), m.d["off"].median()
		rt := ratio(float64(on), float64(off))
		b.printf("  %s: with a witness %s (%s), without %s (%s): %s\n", m.what, ms(on), m.d["on"].span(), ms(off), m.d["off"].span(), rt)
		b.summary(m.what+", with a witness against without", ms(on), ms(off), rt, "", false)
	}
	b.printf("  machine load: %s\n", strings.TrimSpace(machineLoad()))
	return nil
}
