#!/usr/bin/env bash
# Installs what the build, the demo and the tests need and the machine lacks.
# Debian packages come from apt; Go modules come with `go build`.
set -euo pipefail

need=()
command -v git >/dev/null 2>&1 || need+=(git)
# openssh-client also gives ssh-agent and ssh-add: the witness tests run
# litewitness (built from go.mod's tool directives) with its key in ssh-agent.
if ! command -v ssh-keygen >/dev/null 2>&1 || ! command -v ssh-agent >/dev/null 2>&1 ||
  ! command -v ssh-add >/dev/null 2>&1; then
  need+=(openssh-client)
fi
command -v make >/dev/null 2>&1 || need+=(make)
# The durability tests watch fsync and rename order with strace.
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v jq >/dev/null 2>&1 || need+=(jq)     # the worked example of docs/attest.md (e2e/attest)
# Writers whose key lives in ssh-agent are tested with a key on a SoftHSM
# token, generated with OpenSC's pkcs11-tool and loaded with ssh-add -s.
command -v softhsm2-util >/dev/null 2>&1 || need+=(softhsm2)
command -v pkcs11-tool >/dev/null 2>&1 || need+=(opensc)
# The end-to-end tests run the official TypeScript MCP SDK under node --test.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# The page's end-to-end test drives Debian's chromium with playwright-core,
# which downloads no browser of its own.
command -v chromium >/dev/null 2>&1 || need+=(chromium)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    echo "go is at /usr/local/go/bin: add it to PATH" >&2
  else
    echo "Go 1.26 is required (https://go.dev/dl/)" >&2
  fi
  exit 1
fi
