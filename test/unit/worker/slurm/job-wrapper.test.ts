import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { SlurmRequestError } from '../../../../worker/slurm/errors.js';
import {
  bashQuote,
  masterPortFor,
  readBinding,
  readExit,
  renderBatchScript,
  writeJobFiles,
} from '../../../../worker/slurm/job-wrapper.js';

const root = mkdtempSync(join(tmpdir(), 'gpu-broker-slurm-wrap-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('job wrapper script', () => {
  it('bash gets back exactly the words quoted (any text without NUL)', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.string({ unit: 'binary' }).filter((s) => !s.includes('\0')),
          { maxLength: 5 },
        ),
        (words) => {
          const out = execFileSync('bash', ['-c', `printf '%s\\0' ${words.map(bashQuote).join(' ')} END`], {
            encoding: 'utf8',
          });
          expect(out.split('\0').slice(0, -2)).toEqual(words);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('the script is valid bash and embeds prefix + argv as quoted words', () => {
    const script = renderBatchScript({
      jobDir: '/jobs/t1',
      argv: ['python3', '-c', "print('$(id)')", 'a\nb'],
      launcherPrefix: ['bwrap', '--die-with-parent', '--'],
      ntasksPerNode: 4,
    });
    writeFileSync(join(root, 's.sh'), script);
    execFileSync('bash', ['-n', join(root, 's.sh')]);
    expect(script).toContain(
      `gpu-broker-rank 'bwrap' '--die-with-parent' '--' 'python3' '-c' 'print('\\''$(id)'\\'')' 'a\nb'`,
    );
    expect(script).toContain('NTASKS_PER_NODE=4');
  });

  it('refuses what it cannot embed safely', () => {
    const bad = [
      { jobDir: 'rel', argv: ['true'] },
      { jobDir: '/a\nb', argv: ['true'] },
      { jobDir: '/a', argv: [] },
      { jobDir: '/a', argv: ['x\0y'] },
      { jobDir: '/a', argv: ['true'], ntasksPerNode: 0 },
      { jobDir: '/a', argv: ['true'], masterPortBase: 80 },
      { jobDir: '/a', argv: ['true'], masterPortBase: 60000, masterPortSpan: 10000 },
    ];
    for (const b of bad) expect(() => renderBatchScript(b), JSON.stringify(b)).toThrow(SlurmRequestError);
  });

  it('rendezvous port: base + id mod span, same as the script', () => {
    expect(masterPortFor('12345')).toBe(22345);
    expect(masterPortFor('7_3')).toBe(20007);
    const script = renderBatchScript({ jobDir: '/j', argv: ['true'] });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash text
    expect(script).toContain('MASTER_PORT=$(( 20000 + ${SLURM_JOB_ID%%[!0-9]*} % 10000 ))');
  });

  it('job dir 0700, script 0700, never reused; binding/exit readers', async () => {
    const dir = join(root, 'job1');
    const f = await writeJobFiles({ jobDir: dir, argv: ['true'] });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(f.script).mode & 0o777).toBe(0o700);
    await expect(writeJobFiles({ jobDir: dir, argv: ['true'] })).rejects.toThrow(/EEXIST/);
    expect(await readBinding(dir)).toBeNull();
    expect(await readExit(dir)).toBeNull();
    writeFileSync(f.binding, '{"version":2}');
    await expect(readBinding(dir)).rejects.toBeInstanceOf(SlurmRequestError);
    writeFileSync(f.exit, '{"version":1,"job_id":"5","exit_code":3,"ended_at":"x"}');
    expect(await readExit(dir)).toMatchObject({ exit_code: 3 });
  });
});
