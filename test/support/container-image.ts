import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ContainerSetup } from '../../worker/sandbox/container.js';
import { inspectImage, probeContainerEngine } from '../../worker/sandbox/container.js';

/**
 * A tiny image for the container tests, built here because nothing can be pulled: a rootfs of
 * /bin/busybox (busybox-static) with its applets linked under /bin, `podman import`ed as
 * TEST_IMAGE. Built once per machine (under a lock, since test files run in parallel) and reused;
 * its digest pins it.
 */

/** The tag of the test image. */
export const TEST_IMAGE = 'localhost/gpu-broker-test-busybox:1';

/** The engine and the image, as the container tests use them. */
export interface TestImage {
  readonly setup: ContainerSetup;
  /** TEST_IMAGE. */
  readonly tag: string;
  /** `sha256:…`, the image's manifest digest. */
  readonly digest: string;
  /** `localhost/gpu-broker-test-busybox@sha256:…`. */
  readonly pinned: string;
  /** Removes the probe's conf dir. */
  cleanup(): void;
}

const APPLETS = ['sh', 'ls', 'cat', 'echo', 'id', 'sleep', 'nc', 'wget', 'touch', 'mkdir', 'true'];

/** Probes podman (it must work here) and makes sure the test image exists. */
export async function testImage(): Promise<TestImage> {
  const confDir = mkdtempSync(join(tmpdir(), 'gpu-broker-podman-'));
  const probe = await probeContainerEngine({ engine: 'podman', confDir });
  if (probe.setup === null) throw new Error(`these tests need podman: ${probe.detail}`);
  const setup = probe.setup;
  if ((await inspectImage(setup, TEST_IMAGE)) === null) buildImage(setup);
  const local = await inspectImage(setup, TEST_IMAGE);
  const digest = local?.digests[0];
  if (digest === undefined) throw new Error(`${TEST_IMAGE} has no digest after import`);
  return {
    setup,
    tag: TEST_IMAGE,
    digest,
    pinned: `${TEST_IMAGE.replace(/:[^/:]*$/, '')}@${digest}`,
    cleanup: () => rmSync(confDir, { recursive: true, force: true }),
  };
}

function buildImage(setup: ContainerSetup): void {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-rootfs-'));
  try {
    const root = join(dir, 'root');
    for (const d of ['bin', 'dev', 'proc', 'sys', 'etc', 'task', 'tmp'])
      mkdirSync(join(root, d), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    copyFileSync('/bin/busybox', join(root, 'bin', 'busybox'));
    chmodSync(join(root, 'bin', 'busybox'), 0o755);
    for (const applet of APPLETS) symlinkSync('busybox', join(root, 'bin', applet));
    const tar = join(dir, 'rootfs.tar');
    execFileSync('tar', ['--owner=0', '--group=0', '-C', root, '-cf', tar, '.']);
    // The lock serialises parallel test files; the second one finds the image and imports nothing.
    execFileSync(
      'flock',
      [
        join(tmpdir(), 'gpu-broker-test-image.lock'),
        'sh',
        '-c',
        `"${setup.command}" image exists "${TEST_IMAGE}" || "${setup.command}" import "${tar}" "${TEST_IMAGE}"`,
      ],
      { env: { ...setup.env }, stdio: 'ignore' },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
