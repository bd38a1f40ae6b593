package remote

import (
	"fmt"
	"strings"

	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/refs"
)

// RemoteSetupResult says what RemoteSetup configured.
type RemoteSetupResult struct {
	Remote string `json:"remote"`
	// Added and Present are config entries as "key value".
	Added    []string `json:"added"`
	Present  []string `json:"present"`
	Warnings []string `json:"warnings"`
}

// Setup configures remote so that plain `git fetch` and `git push`
// move refs/bernstein/* safely, and fast-forward only:
//
//	remote.<remote>.fetch = refs/bernstein/*:refs/bernstein-remotes/<remote>/*
//	remote.<remote>.push  = HEAD                    (only if it had no push refspec)
//	remote.<remote>.push  = refs/bernstein/*:refs/bernstein/*
//
// No refspec carries '+'. A plain `git fetch` then brings the objects and
// the remote's heads into the remote-tracking refs without touching
// refs/bernstein/* (bernstein fetch moves those, under the writer lock); a
// plain `git push` pushes the current branch as before and every
// refs/bernstein/* ref, and the remote refuses any that is not a
// fast-forward. Running it again changes nothing. It refuses a remote the
// repository (whose common git directory is gitDir) does not have.
func Setup(gitDir, remote string) (*RemoteSetupResult, error) {
	if err := Check(gitDir, remote); err != nil {
		return nil, err
	}
	res := &RemoteSetupResult{Remote: remote, Added: []string{}, Present: []string{}, Warnings: []string{}}
	fetchKey, pushKey := "remote."+remote+".fetch", "remote."+remote+".push"
	fetches, err := git.ConfigValues(git.User, gitDir, fetchKey)
	if err != nil {
		return nil, err
	}
	pushes, err := git.ConfigValues(git.User, gitDir, pushKey)
	if err != nil {
		return nil, err
	}
	if vs, _ := git.ConfigValues(git.User, gitDir, "remote."+remote+".mirror"); len(vs) > 0 && vs[len(vs)-1] == "true" {
		res.Warnings = append(res.Warnings, fmt.Sprintf("remote.%s.mirror is true: a plain 'git push %s' force-pushes and deletes refs, refs/bernstein/* included; use 'bernstein push %s'", remote, remote, remote))
	}
	for _, v := range fetches {
		src, dst, _ := strings.Cut(strings.TrimPrefix(v, "+"), ":")
		if strings.HasPrefix(dst, refs.Prefix) || dst == strings.TrimSuffix(refs.Prefix, "/")+"/*" {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s writes into refs/bernstein/ directly: a 'git fetch --prune' deletes the local refs the remote lacks%s; remove it with: git config --unset %s '%s'",
				fetchKey, v, forcedNote(v), fetchKey, regexpQuote(v)))
		} else if strings.HasPrefix(v, "+") && strings.HasPrefix(src, refs.Prefix) {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s is forced ('+'): a rewritten remote ref would silently replace its remote-tracking copy", fetchKey, v))
		}
	}
	for _, v := range pushes {
		src, _, _ := strings.Cut(strings.TrimPrefix(v, "+"), ":")
		if strings.HasPrefix(v, "+") && (strings.HasPrefix(src, refs.Prefix) || src == "*" || strings.HasPrefix(src, "refs/*")) {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s is forced ('+'): a plain git push would overwrite what other hosts pushed; remove it with: git config --unset %s '%s'", pushKey, v, pushKey, regexpQuote(v)))
		}
	}
	add := func(key, value string, have []string) error {
		for _, h := range have {
			if h == value {
				res.Present = append(res.Present, key+" "+value)
				return nil
			}
		}
		if err := git.SetConfig(gitDir, key, value, true); err != nil {
			return fmt.Errorf("git config --add %s %s: %v", key, value, err)
		}
		res.Added = append(res.Added, key+" "+value)
		return nil
	}
	if err := add(fetchKey, FetchRefspec(remote), fetches); err != nil {
		return nil, err
	}
	if len(pushes) == 0 {
		// Once a remote has a push refspec git ignores push.default: without
		// HEAD, a plain `git push` would stop pushing the current branch.
		if err := add(pushKey, "HEAD", pushes); err != nil {
			return nil, err
		}
	}
	if err := add(pushKey, PushRefspec, pushes); err != nil {
		return nil, err
	}
	return res, nil
}

func forcedNote(v string) string {
	if strings.HasPrefix(v, "+") {
		return ", and its '+' overwrites local rows with the remote's"
	}
	return ""
}

// regexpQuote quotes a config value for `git config --unset KEY VALUE-REGEX`.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return "^" + b.String() + "$"
}
