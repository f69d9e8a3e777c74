import { describe, expect, it } from 'vitest';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import {
  evaluatePolicy,
  type Finding,
  filesToDigest,
  isConfirmable,
} from '../../../../src/domain/policy/evaluate.js';
import { validSpec } from '../../../support/spec.js';

/** Policy findings for task isolation: `network` and the `container` runtime's image pinning. */

const codes = (fs: Finding[]) => fs.map((f) => `${f.severity}:${f.code}`).sort();
const parse = (s: unknown): TaskSpec => TaskSpecSchema.parse(s);
const digest = 'ab'.repeat(32);
const policy = PolicySchema.parse({ executables: [{ path: '/bin/sh' }] });
const container = (image: string, argv = ['python3', 'train.py'], env?: Record<string, string>) =>
  parse(validSpec({ runtime: { kind: 'container', image, argv, ...(env ? { env } : {}) } }));

describe('network', () => {
  it('absent or "none" is fine', () => {
    expect(evaluatePolicy(parse(validSpec()), policy, { fileDigests: {} })).toEqual([]);
    expect(evaluatePolicy(parse(validSpec({ network: 'none' })), policy, { fileDigests: {} })).toEqual([]);
  });

  it('"host" is an error unless policy.allow_network, and the hint names the key', () => {
    const findings = evaluatePolicy(parse(validSpec({ network: 'host' })), policy, { fileDigests: {} });
    expect(codes(findings)).toEqual(['error:NETWORK_NOT_ALLOWED']);
    expect(findings[0]?.path).toBe('network');
    expect(findings[0]?.hint).toContain('policy.allow_network');
    expect(isConfirmable(findings)).toBe(false);
  });

  it('"host" under allow_network still warns, so the reviewer weighs it', () => {
    const open = PolicySchema.parse({ executables: [{ path: '/bin/sh' }], allow_network: true });
    const findings = evaluatePolicy(parse(validSpec({ network: 'host' })), open, { fileDigests: {} });
    expect(codes(findings)).toEqual(['warning:NETWORK_HOST']);
    expect(isConfirmable(findings)).toBe(true);
  });
});

describe('container runtime', () => {
  it('an image pinned by digest is fine, and argv[0] is not checked against host executables', () => {
    const spec = container(`registry.example/team/train@sha256:${digest}`, ['/usr/bin/python3']);
    expect(evaluatePolicy(spec, policy, { fileDigests: {} })).toEqual([]);
    const pinsPython = PolicySchema.parse({ executables: [{ path: '/usr/bin/python3', sha256: digest }] });
    expect(filesToDigest(spec, pinsPython)).toEqual([]);
  });

  it('an image listed by exact ref in policy.images is fine; a near miss is not', () => {
    const listed = PolicySchema.parse({
      images: [{ ref: 'localhost/train:v3', digest: `sha256:${digest}` }],
    });
    expect(evaluatePolicy(container('localhost/train:v3'), listed, { fileDigests: {} })).toEqual([]);
    const miss = evaluatePolicy(container('localhost/train:v4'), listed, { fileDigests: {} });
    expect(codes(miss)).toEqual(['error:IMAGE_NOT_PINNED']);
    expect(miss[0]?.hint).toContain('localhost/train:v3');
  });

  it('an unpinned image is an error that shows the pinned form and the policy key', () => {
    const findings = evaluatePolicy(container('docker.io/pytorch/pytorch:2.3'), policy, { fileDigests: {} });
    expect(codes(findings)).toEqual(['error:IMAGE_NOT_PINNED']);
    const [f] = findings;
    expect(f?.path).toBe('runtime.image');
    expect(f?.hint).toContain('docker.io/pytorch/pytorch@sha256:<64 hex digest>');
    expect(f?.hint).toContain('policy.images');
  });

  it('refused and reserved env names are still refused inside a container', () => {
    const spec = container(`localhost/x@sha256:${digest}`, ['python3'], {
      LD_PRELOAD: '/x.so',
      CUDA_VISIBLE_DEVICES: '0',
    });
    expect(codes(evaluatePolicy(spec, policy, { fileDigests: {} }))).toEqual([
      'error:ENV_REFUSED',
      'error:ENV_RESERVED',
    ]);
  });

  it('a relative argv[0] is fine in a container (it resolves inside the image)', () => {
    const spec = container(`localhost/x@sha256:${digest}`, ['nvidia-smi']);
    expect(evaluatePolicy(spec, policy, { fileDigests: {} })).toEqual([]);
  });
});
