import { describe, expect, it } from 'vitest';
import { escapeField, escapeText, jsonText } from '../../../../src/cli/common/output.js';
import { INVISIBLE_RANGES, invisibleClass } from '../../../../src/domain/policy/invisible-chars.js';
import { invisibleModule } from '../../../../src/http/dashboard.js';

/**
 * docs/security.md "Code the reviewer did not read": one list of characters that display other than they are, rendered visibly by the
 * CLI and (through the generated /assets/invisible.js) by the dashboard.
 */

const SAMPLES = ['\u200b', '\u200d', '\u2060', '\ufeff', '\u00ad', '\u202e', '\u2067', '\u{e0041}', '\u0085'];

describe('the invisible characters', () => {
  it('the dashboard module carries exactly the class the CLI escapes', () => {
    const source = /INVISIBLE_SOURCE = (".*");/.exec(invisibleModule())?.[1];
    const re = new RegExp(JSON.parse(source!) as string, 'u');
    expect(JSON.parse(source!)).toBe(invisibleClass());
    for (const [lo, hi] of INVISIBLE_RANGES)
      for (const cp of [lo, hi]) expect(re.test(String.fromCodePoint(cp)), cp.toString(16)).toBe(true);
    for (const ok of ['a', 'é', '€', '𝄞', ' ', '\u00a0', '日本']) expect(re.test(ok)).toBe(false);
  });

  it('the CLI shows zero-width, bidi and tag characters as escapes, keeping line feeds in text', () => {
    for (const c of SAMPLES) expect(escapeField(`a${c}b`)).toMatch(/^a(\\u[0-9a-f]{4})+b$/);
    expect(escapeField('x\u200by')).toBe('x\\u200by');
    expect(escapeField('tag\u{e0041}')).toBe('tag\\udb40\\udc41');
    expect(escapeText('line 1\n\tline\u200b 2')).toBe('line 1\n\tline\\u200b 2');
    // JSON text keeps its meaning: the escapes are JSON's own.
    const value = { s: `a\u200b\u{e0041}\u2028b` };
    expect(JSON.parse(jsonText(value))).toEqual(value);
  });
});
