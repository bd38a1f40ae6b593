// Helpers of the page's end-to-end test: a temporary repository driven by
// the bernstein binary (BERNSTEIN_BIN), `bernstein serve` as a child process,
// Debian's chromium under playwright-core, and a tampered copy of a
// repository made with plain git.

import { execFile, execFileSync, spawn } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { deflateSync, inflateSync } from 'node:zlib';

import { chromium } from 'playwright-core';

export const BIN = process.env.BERNSTEIN_BIN;
if (!BIN) {
  throw new Error('BERNSTEIN_BIN must name the bernstein binary (scripts/test-e2e.sh sets it)');
}

// CHROMIUM names the browser; scripts/deps.sh installs Debian's. Nothing is
// ever downloaded: playwright-core has no browser of its own.
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  throw new Error(`chromium is required for the browser end-to-end test and ${CHROMIUM} does not exist: run 'make deps' (scripts/deps.sh installs Debian's chromium) or set CHROMIUM`);
}

const run = promisify(execFile);

// The flags keep chromium off the network: the machine's network is closed,
// and chromium's own background connections would only be refused.
export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

// workspace makes a temporary repository with a writer identity and one
// commit. cli and git run in other processes (asynchronously, so that the
// browser's events keep flowing meanwhile) and return stdout.
export function workspace(writer) {
  const dir = mkdtempSync(join(tmpdir(), 'bernstein-e2e-browser-'));
  const env = { ...process.env };
  for (const k of ['BERNSTEIN_AGENT', 'BERNSTEIN_CLAIM_TOKEN', 'BERNSTEIN_ALLOWED_SIGNERS', 'BERNSTEIN_READ_TOKEN']) delete env[k];
  Object.assign(env, {
    BERNSTEIN_HOME: join(dir, 'home'),
    BERNSTEIN_REPO: join(dir, 'repo'),
    HOME: dir,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'e2e', GIT_AUTHOR_EMAIL: 'e2e@example.com',
    GIT_COMMITTER_NAME: 'e2e', GIT_COMMITTER_EMAIL: 'e2e@example.com',
  });
  const repo = env.BERNSTEIN_REPO;
  const exec = async (cmd, args) => {
    try {
      return (await run(cmd, args, { env, encoding: 'utf8', maxBuffer: 16 << 20 })).stdout;
    } catch (err) {
      throw new Error(`${cmd} ${args.join(' ')}: exit ${err.code}\n${err.stderr || err.message}`);
    }
  };
  const ws = {
    dir, env, repo,
    cli: (...args) => exec(BIN, args),
    cliJSON: async (...args) => JSON.parse(await exec(BIN, [...args, '--output-json'])),
    git: (...args) => exec('git', ['-C', repo, ...args]),
    file: (name, text) => {
      const p = join(dir, name);
      writeFileSync(p, text);
      return p;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
  execFileSync(BIN, ['init', '--writer', writer], { env, stdio: 'ignore' });
  // A commit with a tree of its own: only a new tree earns a step.
  writeFileSync(join(repo, 'work.txt'), 'first\n');
  execFileSync('git', ['-C', repo, 'add', 'work.txt'], { env, stdio: 'ignore' });
  execFileSync('git', ['-C', repo, 'commit', '-q', '-m', 'first'], { env, stdio: 'ignore' });
  return ws;
}

// serve starts `bernstein serve` on addr (default a free loopback port) over
// repo and resolves once it prints the URL of its pages.
export async function serve(ws, { addr = '127.0.0.1:0', repo = ws.repo } = {}) {
  const args = ['serve', '--addr', addr, '--repo', repo];
  const child = spawn(BIN, args, { env: ws.env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve printed no URL within 20 s: ${stderr}`)), 20000);
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(/(http:\/\/127\.0\.0\.1:\d+)\/(?:\s|$)/m);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`${args.join(' ')} exited ${code ?? signal}: ${stderr}`)); });
  });
  return {
    url,
    port: Number(new URL(url).port),
    stderr: () => stderr,
    running: () => child.exitCode === null && child.signalCode === null,
    // kill drops every connection at once (SIGKILL: no graceful close).
    kill: async (signal = 'SIGKILL') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

// taskPath is the page of a task, its id percent-encoded as the pages do.
export function taskPath(id) {
  return `/tasks/${encodeURIComponent(id)}`;
}

// tamperedCopy copies the repository and damages blob in the copy only, as
// the root package's tamper tests do (tamper_test.go):
// - 'packed': repack the copy into one pack without deltas and flip one
//   byte inside the compressed data of the blob's entry;
// - 'loose': unpack every object, then flip one byte of the blob's content
//   where marker starts, and store it again compressed (it no longer hashes
//   to its name).
// Git itself then finds the copy damaged; the original is untouched.
export async function tamperedCopy(ws, blob, mode, marker, name = mode) {
  const copy = join(ws.dir, `repo-tampered-${name}`);
  cpSync(ws.repo, copy, { recursive: true });
  const git = (args, input) => execFileSync('git', ['-C', copy, ...args], { env: ws.env, input, encoding: input ? undefined : 'utf8' });
  const objects = join(copy, '.git', 'objects');
  const packDir = join(objects, 'pack');
  const packs = () => readdirSync(packDir).filter((f) => f.endsWith('.pack')).map((f) => join(packDir, f));
  if (mode === 'packed') {
    git(['repack', '-a', '-d', '-f', '-q', '--window=0']);
    const [pack, ...more] = packs();
    if (!pack || more.length) throw new Error(`${more.length + 1} packs after repack`);
    const idx = pack.replace(/\.pack$/, '.idx');
    let off = -1;
    for (const line of String(git(['show-index'], readFileSync(idx))).split('\n')) {
      const f = line.trim().split(/\s+/);
      if (f[1] === blob) off = Number(f[0]);
    }
    if (off < 0) throw new Error(`blob ${blob} is not in the copy's pack`);
    chmodSync(pack, 0o644);
    const b = readFileSync(pack);
    b[off + 6] ^= 0x40; // inside the entry's compressed data
    writeFileSync(pack, b);
  } else if (mode === 'loose') {
    const stash = join(ws.dir, `packs-${name}`);
    mkdirSync(stash);
    const moved = packs().map((p) => {
      const to = join(stash, basename(p));
      renameSync(p, to);
      rmSync(p.replace(/\.pack$/, '.idx'), { force: true });
      rmSync(p.replace(/\.pack$/, '.rev'), { force: true });
      return to;
    });
    for (const p of moved) git(['unpack-objects', '-q'], readFileSync(p));
    const path = join(objects, blob.slice(0, 2), blob.slice(2));
    const plain = inflateSync(readFileSync(path));
    const i = plain.indexOf(marker);
    if (i < 0) throw new Error(`blob ${blob} does not hold ${marker}`);
    plain[i] ^= 0x01; // one byte of the payload
    chmodSync(path, 0o644);
    writeFileSync(path, deflateSync(plain));
  } else {
    throw new Error(`tamper mode ${mode}: packed or loose`);
  }
  return copy;
}
