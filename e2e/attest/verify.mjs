// Verifies a bernstein attestation bundle with sigstore-js (the npm sigstore
// package's verifier, @sigstore/verify): a Sigstore bundle v0.3 whose key is
// a public-key hint, with no transparency log entry and no timestamp. The
// key is the writer's, as `git show refs/bernstein/writers/<w>.<key>:<w>.pub`
// prints it (ssh-ed25519 or ecdsa-sha2-nistp256). The statement's subject
// must name the digest of the payload file.
//
//   node verify.mjs BUNDLE.json PAYLOAD_FILE WRITER.pub
//
// prints the predicate type and exits 0, or prints why and exits 1.

import { createHash, createPublicKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

import { bundleFromJSON } from '@sigstore/bundle';
import { Verifier, toSignedEntity, toTrustMaterial } from '@sigstore/verify';

// An SSH public key line as a node KeyObject. The SSH wire form is a list
// of length-prefixed strings: the key type, then its fields.
export function sshPublicKey(line) {
  const [type, b64] = line.trim().split(/\s+/);
  const wire = Buffer.from(b64, 'base64');
  const fields = [];
  for (let i = 0; i < wire.length;) {
    const n = wire.readUInt32BE(i);
    fields.push(wire.subarray(i + 4, i + 4 + n));
    i += 4 + n;
  }
  if (fields[0].toString() !== type) throw new Error(`key line says ${type}, its blob ${fields[0]}`);
  if (type === 'ssh-ed25519') {
    return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: fields[1].toString('base64url') }, format: 'jwk' });
  }
  if (type === 'ecdsa-sha2-nistp256') {
    const point = fields[2]; // 0x04 || X || Y
    return createPublicKey({
      key: { kty: 'EC', crv: 'P-256', x: point.subarray(1, 33).toString('base64url'), y: point.subarray(33).toString('base64url') },
      format: 'jwk',
    });
  }
  throw new Error(`unsupported key type ${type}`);
}

// No certificate authority, log or timestamp authority is trusted: only the
// key the hint names.
const EMPTY_ROOT = { tlogs: [], ctlogs: [], certificateAuthorities: [], timestampAuthorities: [] };

export function verifyBundle(bundleJSON, payload, keyLine) {
  const key = sshPublicKey(keyLine);
  const bundle = bundleFromJSON(bundleJSON);
  const hint = bundle.verificationMaterial.content.publicKey.hint;
  const trust = toTrustMaterial(EMPTY_ROOT, (h) => {
    if (h !== hint) throw new Error(`unknown key hint ${h}`);
    return { publicKey: key, validFor: () => true };
  });
  const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  verifier.verify(toSignedEntity(bundle));
  // The signature covers the statement; the statement must be about this
  // payload.
  const envelope = bundle.content.dsseEnvelope;
  if (envelope.payloadType !== 'application/vnd.in-toto+json') throw new Error(`payload type ${envelope.payloadType}`);
  const statement = JSON.parse(Buffer.from(envelope.payload).toString('utf8'));
  if (statement._type !== 'https://in-toto.io/Statement/v1') throw new Error(`statement type ${statement._type}`);
  const digest = createHash('sha256').update(payload).digest('hex');
  if (!statement.subject.some((s) => s.digest.sha256 === digest)) {
    throw new Error(`no subject has the payload's sha256 ${digest}`);
  }
  return statement;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [bundlePath, payloadPath, keyPath] = process.argv.slice(2);
  try {
    const st = verifyBundle(JSON.parse(readFileSync(bundlePath, 'utf8')), readFileSync(payloadPath), readFileSync(keyPath, 'utf8'));
    console.log(`verified: ${st.predicateType} about ${st.subject.map((s) => s.name).join(', ')}`);
  } catch (e) {
    console.error(`not verified: ${e.message}`);
    process.exit(1);
  }
}
