import { describe, expect, it } from 'vitest';
import { InputPathSchema, OutputPathSchema } from '../../../src/contracts/task-spec.js';

/**
 * Input paths (docs/security.md "Code the reviewer did not read"): refused when the spec is parsed, so a reviewer never sees a name
 * that displays other than it is, and nothing fails only after review.
 */

const message = (p: string) => {
  const r = InputPathSchema.safeParse(p);
  return r.success ? null : r.error.issues.map((i) => i.message).join('; ');
};

describe('InputPathSchema', () => {
  it('refuses control, bidi and zero-width characters, naming the code point', () => {
    for (const [p, cp] of [
      ['a\nb.py', 'U+000A'],
      ['a\rb.py', 'U+000D'],
      ['a\u001bb.py', 'U+001B'],
      ['a\u0085b.py', 'U+0085'],
      ['evil\u202eyp.exe', 'U+202E'],
      ['a\u2066b.py', 'U+2066'],
      ['a\u200bb.py', 'U+200B'],
      ['a\ufeffb.py', 'U+FEFF'],
      ['a\u061cb.py', 'U+061C'],
    ] as const) {
      expect(message(p), JSON.stringify(p)).toContain(cp);
      expect(OutputPathSchema.safeParse(p).success).toBe(false);
    }
  });

  it('refuses segments starting with "-" and segments over 255 UTF-8 bytes', () => {
    for (const p of ['-c', '-', '-m', 'src/--help.py']) expect(message(p), p).toContain('"-"');
    expect(message(`${'a'.repeat(256)}.py`.slice(0, 256))).toContain('255 bytes');
    expect(message('é'.repeat(128))).toContain('255 bytes'); // 256 bytes in UTF-8
    expect(message('é'.repeat(127))).toBeNull();
    expect(message(`src/${'a'.repeat(255)}`)).toBeNull();
  });

  it('accepts ordinary names, non-ASCII letters included', () => {
    for (const p of ['main.py', 'src/train-v2.py', 'data/naïve_bayes.py', 'a-b/c.py', '.hidden/x'])
      expect(message(p), p).toBeNull();
  });
});
