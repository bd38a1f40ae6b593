package main

import (
	"fmt"
	"time"

	"github.com/bernstein/bernstein"
)

// scaleRepo is a repository of many tasks, each created, claimed and
// given one artifact version: two refs a task (ledger and journal), as a
// team's repository holds them.
type scaleRepo struct {
	dir     string
	tasks   int
	elapsed time.Duration
}

func scaleTask(i int) string { return fmt.Sprintf("s-%06d", i) }

// buildScale builds a repository of n tasks through the library, many
// goroutines on one Store so that their writes share batches.
func (b *bench) buildScale(dir, home string, n, workers int) (*scaleRepo, error) {
	t0 := time.Now()
	opts := bernstein.Options{Repo: dir, Home: home}
	if _, err := bernstein.Init(opts, benchWriter); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	s, err := bernstein.Open(opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	r := &scaleRepo{dir: dir, tasks: n}
	err = parallel(n, workers, func(i int) error {
		id := scaleTask(i)
		if _, err := s.CreateTask(bernstein.TaskSpec{ID: id, Title: "scale task " + id}); err != nil {
			return fmt.Errorf("create %s: %w", id, err)
		}
		tok, err := s.Claim(id, agentOf(i))
		if err != nil {
			return fmt.Errorf("claim %s: %w", id, err)
		}
		if _, err := s.Post(bernstein.PostRequest{Task: id, Key: "summary", Agent: agentOf(i), ClaimToken: tok,
			Payload: reportPayload("scale", i, 256)}); err != nil {
			return fmt.Errorf("post %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.elapsed = time.Since(t0)
	return r, nil
}
