// Package ident checks the identifier shapes bernstein uses (task ids, keys,
// writer, agent and gate names) without regular expressions, which would be
// compiled at start-up by every command.
package ident

// Match reports whether s is 1 to max bytes long and has only letters,
// digits and bytes of extra, starting with a letter or a digit. With lower,
// letters must be lower case and s may start with any allowed byte.
func Match(s string, max int, extra string, lower bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z' && !lower:
		default:
			if i == 0 && !lower {
				return false
			}
			if !contains(extra, c) {
				return false
			}
		}
	}
	return true
}

func contains(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
