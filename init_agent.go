package bernstein

import "github.com/bernstein/bernstein/keys"

// InitAgent is Init for a writer whose signing key lives in ssh-agent (a
// hardware token, or a PKCS#11 key loaded with `ssh-add -s`): key names it
// among the agent's keys (keys.SelectAgentKey; "" for the agent's only
// writer-capable key). BERNSTEIN_HOME keeps the public key and the HMAC key.
// The agent is asked before anything is written, so a missing or locked
// agent is one error and nothing changes, the repository included.
func InitAgent(o Options, writer, key string) (*InitResult, error) {
	pub, err := keys.SelectAgentKey(key)
	if err != nil {
		return nil, err
	}
	return initWith(o, func(home string) (*keys.Identity, bool, error) { return keys.CreateAgent(home, writer, pub) })
}
