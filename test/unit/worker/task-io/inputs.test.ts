import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InputCache } from '../../../../worker/task-io/input-cache.js';
import { placeInputs } from '../../../../worker/task-io/inputs.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

afterEach(() => removeTempDirs());

function source(blobs: Record<string, Buffer>, cacheBytes = 1 << 20) {
  const fetched: string[] = [];
  const cache = new InputCache(join(makeTempDir('cache'), 'c'), cacheBytes);
  return {
    fetched,
    cache,
    fetch: async (_execution: string, digest: string, _max: number, into: string) => {
      fetched.push(digest);
      const b = blobs[digest];
      if (!b) throw new Error('404');
      writeFileSync(into, b, { flag: 'wx', mode: 0o600 });
    },
  };
}

describe('placeInputs', () => {
  const code = Buffer.from('print("hi")\n');
  const input = (path: string, content = code, extra = {}) => ({
    path,
    sha256: sha(content),
    size: content.length,
    ...extra,
  });

  it('fetches a blob once, for two paths and for two executions, and places it read-only', async () => {
    const src = source({ [sha(code)]: code });
    const a = makeTempDir('exec-a');
    expect(
      await placeInputs([input('a.py'), input('lib/b.py', code, { executable: true })], a, 'e1', src),
    ).toBeNull();
    const b = makeTempDir('exec-b');
    expect(await placeInputs([input('a.py')], b, 'e2', src)).toBeNull();
    expect(src.fetched).toEqual([sha(code)]);
    expect(readFileSync(join(a, 'lib/b.py'))).toEqual(code);
    expect(lstatSync(join(a, 'a.py')).mode & 0o777).toBe(0o444);
    expect(lstatSync(join(a, 'lib/b.py')).mode & 0o777).toBe(0o555);
  });

  it('refuses content from the master that is not what the spec names, and caches nothing', async () => {
    const src = source({ [sha(code)]: Buffer.from('print("evil")\n') });
    const why = await placeInputs([input('a.py')], makeTempDir('exec'), 'e1', src);
    expect(why).toMatch(
      /^input a\.py: the master sent \d+ bytes with sha256 [0-9a-f]{64}, the approved spec names/,
    );
    expect(await src.cache.lookup(sha(code))).toBeNull();
  });

  it('refuses paths that escape, whatever reached the worker', async () => {
    const src = source({ [sha(code)]: code });
    for (const path of ['../x.py', '/etc/x', 'a/./b', 'a//b', 'a\\b']) {
      expect(await placeInputs([input(path)], makeTempDir('exec'), 'e1', src)).toMatch(
        /not a plain relative path/,
      );
    }
    expect(src.fetched).toEqual([]);
  });

  it('keeps the cache under its bound, least recently used out first', async () => {
    const one = Buffer.alloc(600, 1);
    const two = Buffer.alloc(600, 2);
    const src = source({ [sha(one)]: one, [sha(two)]: two }, 1000);
    await placeInputs([input('one.bin', one)], makeTempDir('exec'), 'e1', src);
    await placeInputs([input('two.bin', two)], makeTempDir('exec'), 'e2', src);
    expect(await src.cache.lookup(sha(one))).toBeNull();
    expect(readFileSync((await src.cache.lookup(sha(two)))!)).toEqual(two);
  });

  it('a cached copy changed behind the worker is caught after it landed, removed, and nothing is left placed', async () => {
    const src = source({ [sha(code)]: code });
    await placeInputs([input('a.py')], makeTempDir('exec'), 'e1', src);
    writeFileSync((await src.cache.lookup(sha(code)))!, 'print("evil")\n');
    const dir = makeTempDir('exec');
    expect(await placeInputs([input('a.py')], dir, 'e2', src)).toMatch(
      /^input a\.py: the worker's cached copy of sha256 [0-9a-f]{64} has sha256 [0-9a-f]{64} \(14 bytes\); the cache was changed/,
    );
    expect(existsSync(join(dir, 'a.py'))).toBe(false);
    expect(await src.cache.lookup(sha(code))).toBeNull();
  });

  it('a fetch that fails half way leaves no file behind', async () => {
    const src = source({});
    src.fetch = async (_e: string, _d: string, _m: number, into: string) => {
      writeFileSync(into, 'half', { flag: 'wx' });
      throw new Error('aborted');
    };
    const dir = makeTempDir('exec');
    expect(await placeInputs([input('a.py')], dir, 'e1', src)).toMatch(
      /^input a\.py: cannot fetch sha256 [0-9a-f]{64} from the master: aborted$/,
    );
    expect(existsSync(join(dir, 'a.py'))).toBe(false);
    expect(await src.cache.lookup(sha(code))).toBeNull();
  });

  it('removes the temporary files of copies a stopped worker left, and nothing else', async () => {
    const src = source({ [sha(code)]: code });
    await placeInputs([input('a.py')], makeTempDir('exec'), 'e1', src);
    const dir = src.cache.dir;
    const leftover = join(dir, `.${sha(code)}.123.0b3e5f2a-1c2d-4e5f-8a9b-0c1d2e3f4a5b.tmp`);
    writeFileSync(leftover, 'half a copy');
    const stranger = join(dir, 'notes.txt');
    writeFileSync(stranger, 'not ours to judge');
    // A directory by a leftover's name (only the worker's uid could make one) is left, and does not stop the start.
    const odd = join(dir, `.${sha(code)}.456.dir.tmp`);
    mkdirSync(odd);
    src.cache.removeLeftovers();
    expect(existsSync(leftover)).toBe(false);
    expect(existsSync(stranger)).toBe(true);
    expect(existsSync(odd)).toBe(true);
    expect(await src.cache.lookup(sha(code))).not.toBeNull();
  });

  it('an entry that goes between the lookup and the copy is fetched instead (the cache only saves a fetch)', async () => {
    const src = source({ [sha(code)]: code });
    await placeInputs([input('a.py')], makeTempDir('exec'), 'e1', src);
    expect(src.fetched).toHaveLength(1);
    // Another execution's add trims it, right after this one's lookup found it.
    const lookup = src.cache.lookup.bind(src.cache);
    src.cache.lookup = async (digest: string) => {
      const path = await lookup(digest);
      if (path !== null) await src.cache.remove(digest);
      return path;
    };
    const dir = makeTempDir('exec');
    expect(await placeInputs([input('a.py')], dir, 'e2', src)).toBeNull();
    expect(src.fetched).toHaveLength(2);
    expect(readFileSync(join(dir, 'a.py'))).toEqual(code);
  });

  it('a link put in the cache in place of an entry is not followed', async () => {
    const src = source({ [sha(code)]: code });
    const target = join(makeTempDir('elsewhere'), 'secret');
    writeFileSync(target, 'not an input');
    mkdirSync(src.cache.dir, { recursive: true });
    symlinkSync(target, join(src.cache.dir, sha(code)));
    expect(await src.cache.lookup(sha(code))).toBeNull();
    const dir = makeTempDir('exec');
    expect(await placeInputs([input('a.py')], dir, 'e1', src)).toBeNull();
    expect(src.fetched).toHaveLength(1);
    expect(readFileSync(join(dir, 'a.py'))).toEqual(code);
  });
});
