// End to end: bernstein's attestations (`artifact attest`, `task attest`)
// checked by sigstore-js, the npm sigstore package's bundle verification
// (verify.mjs), for an Ed25519 writer and an ECDSA P-256 one; a changed
// byte anywhere is refused; a tampered version is never attested. The
// binary comes from BERNSTEIN_BIN.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { verifyBundle } from './verify.mjs';

const BIN = process.env.BERNSTEIN_BIN;
if (!BIN) throw new Error('BERNSTEIN_BIN must name the bernstein binary (scripts/test-e2e.sh sets it)');

const ARTIFACT_PREDICATE = 'https://github.com/bernstein/bernstein/blob/main/docs/attest.md#artifact-version-v1';
const JOURNAL_PREDICATE = 'https://github.com/bernstein/bernstein/blob/main/docs/attest.md#task-journal-v1';

// A repository whose writer `writer` signs with an Ed25519 key (made by
// init) or an ECDSA P-256 one (made by ssh-keygen, in PKCS#8).
function workspace(t, writer, kind) {
  const dir = mkdtempSync(join(tmpdir(), 'bernstein-attest-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env = { ...process.env };
  for (const k of ['BERNSTEIN_AGENT', 'BERNSTEIN_CLAIM_TOKEN', 'BERNSTEIN_ALLOWED_SIGNERS', 'SSH_AUTH_SOCK']) delete env[k];
  Object.assign(env, {
    BERNSTEIN_HOME: join(dir, 'home'), BERNSTEIN_REPO: join(dir, 'repo'), HOME: dir, GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'e2e', GIT_AUTHOR_EMAIL: 'e2e@example.com', GIT_COMMITTER_NAME: 'e2e', GIT_COMMITTER_EMAIL: 'e2e@example.com',
  });
  const run = (cmd, args, input) => execFileSync(cmd, args, { env, input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
  const ws = {
    dir, env, repo: env.BERNSTEIN_REPO,
    cli: (...args) => run(BIN, args),
    // status, stdout, stderr of a command expected to fail
    fail: (...args) => {
      const r = spawnSync(BIN, args, { env, encoding: 'utf8' });
      return { status: r.status, out: r.stdout, err: r.stderr };
    },
    git: (...args) => run('git', ['-C', env.BERNSTEIN_REPO, ...args]),
    gitIn: (input, ...args) => run('git', ['-C', env.BERNSTEIN_REPO, ...args], input),
  };
  if (kind === 'ecdsa') {
    const home = env.BERNSTEIN_HOME;
    mkdirSync(home, { mode: 0o700 });
    run('ssh-keygen', ['-q', '-t', 'ecdsa', '-b', '256', '-N', '', '-C', '', '-f', join(dir, 'ec')]);
    run('ssh-keygen', ['-q', '-p', '-m', 'PKCS8', '-N', '', '-P', '', '-f', join(dir, 'ec')]);
    writeFileSync(join(home, 'signing.pem'), readFileSync(join(dir, 'ec')), { mode: 0o600 });
    writeFileSync(join(home, 'hmac.key'), createHash('sha256').update(dir).digest('hex') + '\n', { mode: 0o600 });
    writeFileSync(join(home, 'writer'), writer + '\n', { mode: 0o600 });
    chmodSync(join(home, 'signing.pem'), 0o600);
  }
  ws.cli('init', '--writer', writer);
  // A commit with a tree of its own: a checkpoint of it earns a step.
  writeFileSync(join(ws.repo, 'work.txt'), 'first\n');
  ws.git('add', 'work.txt');
  ws.git('commit', '-q', '-m', 'first');
  // The key as git shows it: the one key ref of the writer (one ref per
  // writer and key, docs/format.md).
  const keyRefs = ws.git('for-each-ref', '--format=%(refname)', `refs/bernstein/writers/${writer}.*`).trim().split('\n');
  assert.equal(keyRefs.length, 1, `key refs of ${writer}: ${keyRefs}`);
  ws.pub = ws.git('show', `${keyRefs[0]}:${writer}.pub`);
  return ws;
}

// A task with two versions of a report and a table, worked and completed.
function completedTask(ws, task) {
  ws.cli('task', 'create', task, '--title', 'attested');
  const token = ws.cli('task', 'claim', task, '--agent', 'agent-1').trim();
  const post = (...a) => ws.cli('artifact', 'post', task, ...a, '--agent', 'agent-1', '--claim-token', token);
  post('notes', '--type', 'report', '--body', '# first');
  post('notes', '--type', 'report', '--body', '# second');
  post('grid', '--type', 'table', '--column', 'a', '--column', 'b', '--row', '1,2');
  ws.cli('task', 'start', task);
  ws.cli('checkpoint', task, '--commit', 'HEAD');
  ws.cli('task', 'complete', task);
}

// A version's payload bytes, read with git from the journal commit whose
// tree holds it (each row's tree holds that row's files only).
function payloadOf(ws, task, key, v) {
  const path = `artifacts/${key}/v${v}.json`;
  for (const c of ws.git('rev-list', `refs/bernstein/journal/${task}`).trim().split('\n')) {
    if (ws.git('ls-tree', '--name-only', '-r', c).split('\n').includes(path)) {
      return Buffer.from(ws.git('cat-file', 'blob', `${c}:${path}`), 'utf8');
    }
  }
  throw new Error(`no journal commit of ${task} holds ${path}`);
}

// Changes one byte of a base64 field, decoded.
function flipBase64(b64, at) {
  const b = Buffer.from(b64, 'base64');
  b[at % b.length] ^= 1;
  return b.toString('base64');
}

for (const kind of ['ed25519', 'ecdsa']) {
  test(`${kind}: artifact attest --bundle verifies with sigstore-js; a changed byte does not`, (t) => {
    const ws = workspace(t, `w-${kind}`, kind);
    completedTask(ws, 'T-1');
    const bundle = JSON.parse(ws.cli('artifact', 'attest', 'T-1', 'notes', '--version', '1', '--bundle'));
    assert.equal(bundle.mediaType, 'application/vnd.dev.sigstore.bundle.v0.3+json');
    assert.deepEqual(bundle.verificationMaterial.tlogEntries, []);
    const payload = payloadOf(ws, 'T-1', 'notes', 1);
    const st = verifyBundle(bundle, payload, ws.pub);
    assert.equal(st.predicateType, ARTIFACT_PREDICATE);
    assert.equal(st.subject[0].name, 'bernstein://T-1/notes/v1');
    // git's own id of the payload bytes
    assert.equal(st.subject[0].digest.gitBlob, ws.gitIn(payload, 'hash-object', '--stdin').trim());
    const p = st.predicate;
    assert.equal(p.version, 1);
    assert.equal(p.position.journal_index, 0);
    assert.equal(p.row.index, 0);
    assert.equal(p.row.data.spine_entry_hash, p.spine_entry_hash);
    // the row commit is the journal's first commit, as git walks it
    assert.equal(p.row_commit, ws.git('rev-list', '--max-parents=0', 'refs/bernstein/journal/T-1').trim());
    // the progress vector at row 0: no work yet, the ledger as it stands
    assert.equal(p.progress.checkpoints, 0);
    assert.equal(p.progress.ledger_phase, 'completed');
    assert.equal(p.progress_hash, createHash('sha256').update(canonical(p.progress)).digest('hex'));

    // The latest version by default.
    const latest = verifyBundle(JSON.parse(ws.cli('artifact', 'attest', 'T-1', 'notes', '--bundle')), payloadOf(ws, 'T-1', 'notes', 2), ws.pub);
    assert.equal(latest.predicate.version, 2);

    // A changed byte of the signature, of the statement, or of the payload.
    const badSig = structuredClone(bundle);
    badSig.dsseEnvelope.signatures[0].sig = flipBase64(bundle.dsseEnvelope.signatures[0].sig, 7);
    assert.throws(() => verifyBundle(badSig, payload, ws.pub), /signature verification failed/);
    const badStatement = structuredClone(bundle);
    badStatement.dsseEnvelope.payload = flipBase64(bundle.dsseEnvelope.payload, 200);
    assert.throws(() => verifyBundle(badStatement, payload, ws.pub), /signature verification failed/);
    const badPayload = Buffer.concat([payload.subarray(0, 10), Buffer.from('X'), payload.subarray(11)]);
    assert.throws(() => verifyBundle(bundle, badPayload, ws.pub), /no subject has the payload's sha256/);

    // The bare envelope is the bundle's, field for field.
    const envelope = JSON.parse(ws.cli('artifact', 'attest', 'T-1', 'notes', '--version', '1'));
    assert.equal(envelope.payloadType, 'application/vnd.in-toto+json');
    assert.equal(envelope.payload, bundle.dsseEnvelope.payload);
    assert.equal(envelope.signatures[0].keyid, bundle.verificationMaterial.publicKey.hint);
    const wrapped = { mediaType: bundle.mediaType, verificationMaterial: bundle.verificationMaterial, dsseEnvelope: envelope };
    assert.equal(verifyBundle(wrapped, payload, ws.pub).predicateType, ARTIFACT_PREDICATE);

    // Attesting wrote nothing, and audit verify still verifies.
    assert.match(ws.cli('audit', 'verify', '--strict'), /verified: everything holds/);
  });

  test(`${kind}: task attest of a sealed journal verifies with sigstore-js`, (t) => {
    const ws = workspace(t, `w-${kind}`, kind);
    completedTask(ws, 'T-2');
    const bundle = JSON.parse(ws.cli('task', 'attest', 'T-2', '--bundle'));
    // The subject is the seal: the sha256 of its spine entry's canonical
    // bytes, which the seal commit's message carries.
    const spine = ws.git('log', '-1', '--format=%B', `refs/bernstein/spine/w-${kind}`).trim().split('\n\n')[1];
    assert.equal(JSON.parse(spine).kind, 'journal_seal');
    const st = verifyBundle(bundle, Buffer.from(spine, 'utf8'), ws.pub);
    assert.equal(st.predicateType, JOURNAL_PREDICATE);
    assert.equal(st.subject[0].digest.gitCommit, ws.git('rev-parse', `refs/bernstein/spine/w-${kind}`).trim());
    const p = st.predicate;
    assert.equal(p.seal.rows, 4);
    assert.equal(p.progress.checkpoints, 1);
    assert.equal(p.progress.terminal, true);
    assert.deepEqual(p.artifacts.map((a) => `${a.key}/v${a.version}`), ['notes/v1', 'notes/v2', 'grid/v1']);
    for (const a of p.artifacts) {
      const bytes = payloadOf(ws, 'T-2', a.key, a.version);
      assert.equal(a.content_hash, 'sha256:' + createHash('sha256').update(bytes).digest('hex'));
      assert.equal(a.blob, ws.gitIn(bytes, 'hash-object', '--stdin').trim());
    }
  });
}

test('a tampered version, or an open journal, is refused in one line', (t) => {
  const ws = workspace(t, 'w-t', 'ed25519');
  ws.cli('task', 'create', 'T-3', '--title', 'open');
  const token = ws.cli('task', 'claim', 'T-3', '--agent', 'agent-1').trim();
  ws.cli('artifact', 'post', 'T-3', 'notes', '--type', 'report', '--body', 'x', '--agent', 'agent-1', '--claim-token', token);
  let r = ws.fail('task', 'attest', 'T-3');
  assert.equal(r.status, 2);
  assert.match(r.err, /^bernstein: not attested: task T-3: journal identity unverifiable: no journal seal[^\n]*\n$/);
  assert.equal(r.out, '');

  // The head row's commit rewritten without its signature.
  const head = ws.git('rev-parse', 'refs/bernstein/journal/T-3').trim();
  const body = ws.git('cat-file', 'commit', head).replace(/gpgsig [\s\S]*?-----END SSH SIGNATURE-----\n/, '');
  ws.git('update-ref', 'refs/bernstein/journal/T-3', ws.gitIn(body, 'hash-object', '-t', 'commit', '-w', '--stdin').trim());
  r = ws.fail('artifact', 'attest', 'T-3', 'notes', '--bundle');
  assert.equal(r.status, 2);
  assert.match(r.err, /^bernstein: not attested: notes v1 of task T-3 is tampered: [^\n]*\n$/);
  assert.equal(r.out, '');
  r = ws.fail('artifact', 'attest', 'T-3', 'nothing');
  assert.equal(r.status, 1);
  assert.match(r.err, /^bernstein: task T-3 has no artifact nothing\n$/);
});

// RFC 8785 for what the predicate holds (strings, integers, booleans).
// The worked example of docs/attest.md, run as written: its first sh block
// after the heading, by bash, from the top folder of a repository set up as
// the README's Use section sets it up, with bernstein on PATH and SRC this
// checkout. Every line must succeed but the verification of the changed
// payload, which must fail as the comment under it says.
test('the worked example of docs/attest.md runs as written', (t) => {
  const src = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const doc = readFileSync(join(src, 'docs', 'attest.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Worked example'));
  const m = section.match(/```sh\n([\s\S]*?)```/);
  assert.ok(m, 'docs/attest.md has no sh block under "## Worked example"');
  const ws = workspace(t, 'w-doc', 'ed25519');
  ws.cli('task', 'create', 'T-1', '--title', 'Fix the planner');
  const token = ws.cli('task', 'claim', 'T-1', '--agent', 'agent-7').trim();
  ws.cli('artifact', 'post', 'T-1', 'summary', '--type', 'report', '--body', '# The planner\n\nA nested loop.', '--agent', 'agent-7', '--claim-token', token);
  const script = `set -o pipefail\ntrap 'echo "FAILED: $BASH_COMMAND" >&2' ERR\n${m[1]}`;
  const env = { ...ws.env, SRC: src, PATH: `${dirname(BIN)}:${process.env.PATH}` };
  const r = spawnSync('bash', ['-c', script], { cwd: ws.repo, env, encoding: 'utf8' });
  const failed = r.stderr.split('\n').filter((l) => l.startsWith('FAILED: '));
  assert.deepEqual(failed, ['FAILED: node "$SRC/e2e/attest/verify.mjs" summary.bundle.json summary.json writer.pub'], r.stderr);
  assert.match(r.stdout, new RegExp(`^verified: ${ARTIFACT_PREDICATE.replace(/[.]/g, '\\.')} about bernstein://T-1/summary/v1$`, 'm'));
  assert.match(r.stderr, /^not verified: no subject has the payload's sha256/m);
  assert.match(r.stdout, /SHA256:/); // ssh-keygen -lf printed the fingerprint
  const predicate = JSON.parse(r.stdout.slice(r.stdout.lastIndexOf('\n{') + 1));
  assert.equal(predicate.version, 1);
  assert.equal(predicate.row.data.spine_entry_hash, predicate.spine_entry_hash);
});

function canonical(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
}
