import { describe, expect, it } from 'vitest';
import { mountPointOf, parseMount } from '../../../../worker/task-io/mounts.js';

describe('--mount NAME=PATH[:ro|:rw]', () => {
  it('is read-only unless :rw is given', () => {
    expect(parseMount('imagenet-val=/srv/data/val')).toEqual({
      name: 'imagenet-val',
      host_path: '/srv/data/val',
      read_only: true,
    });
    expect(parseMount('scratch=/srv/scratch:rw')).toMatchObject({
      host_path: '/srv/scratch',
      read_only: false,
    });
    expect(parseMount('x=/a:ro')).toMatchObject({ host_path: '/a', read_only: true });
    expect(mountPointOf('imagenet-val')).toBe('/mnt/imagenet-val');
  });

  it('refuses relative paths and names that are not plain', () => {
    for (const bad of ['data=relative/path', 'Data=/x', '../x=/x', 'a/b=/x', '=/x', 'x'])
      expect(() => parseMount(bad)).toThrow(/--mount/);
  });
});
