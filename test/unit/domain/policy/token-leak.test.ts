import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TOKEN_PREFIX } from '../../../../src/broker/principals.js';
import { tokenLeakIn } from '../../../../src/domain/policy/token-leak.js';

/** ADR 0041: the net behind the model sandbox, for review comments (src/domain/policy/token-leak.ts). */

/** A token as createPrincipal issues one. */
const issue = () => TOKEN_PREFIX + randomBytes(32).toString('base64url');
const reverse = (s: string) => [...s].reverse().join('');
const b64 = (s: string) => Buffer.from(s).toString('base64');

describe('tokenLeakIn', () => {
  const token = issue();

  it('knows the shape of the tokens gpu-broker issues', () => {
    expect(TOKEN_PREFIX).toBe('gpb_');
    expect(tokenLeakIn(`the token is ${token}.`)).toBe('a token as written');
    expect(tokenLeakIn(`cut: ${token.slice(0, 24)}`)).toBe('a token as written');
  });

  it.each([
    ['split across lines', token.match(/.{1,5}/g)!.join('\n'), 'a token split by spaces'],
    ['split by zero-width spaces', [...token].join('\u200b'), 'a token split by spaces'],
    ['reversed', `x ${reverse(token)} y`, 'a reversed token'],
    ['base64', `see ${b64(token)}`, 'a base64-encoded token'],
    ['base64url, no padding', Buffer.from(token).toString('base64url'), 'a base64-encoded token'],
    ['base64 inside a longer string', b64(`export GPU_BROKER_TOKEN=${token}\n`), 'a base64-encoded token'],
    [
      'base64, wrapped at 20',
      b64(`x${token}`)
        .match(/.{1,20}/g)!
        .join('\n'),
      'a base64-encoded token',
    ],
    ['hex', Buffer.from(token).toString('hex'), 'a hex-encoded token'],
    [
      'HEX at an odd offset',
      `a${Buffer.from(`:${token}`).toString('hex').toUpperCase()}`,
      'a hex-encoded token',
    ],
    ['base64 of the reversed text', reverse(b64(token)), 'a base64-encoded token'],
  ] as const)('finds a token %s', (_name, text, form) => {
    expect(tokenLeakIn(text)).toBe(form);
  });

  it('finds a piece of a known token without its prefix, as written or encoded', () => {
    const body = token.slice(TOKEN_PREFIX.length);
    expect(tokenLeakIn(`secret: ${body.slice(5, 20)}`)).toBeNull();
    expect(tokenLeakIn(`secret: ${body.slice(5, 20)}`, [token])).toBe('a token as written');
    expect(tokenLeakIn(b64(body), [token])).toBe('a base64-encoded token');
    expect(tokenLeakIn(Buffer.from(body).toString('hex'), [token])).toBe('a hex-encoded token');
    expect(tokenLeakIn(reverse(body), [token])).toBe('a reversed token');
  });

  it('finds a token disguised: percent-encoded, fullwidth, dotted, bulleted, upper-cased (fresh-eyes review)', () => {
    const pct = (t: string) => [...Buffer.from(t)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
    const fullwidth = (t: string) =>
      [...t].map((c) => (/[!-~]/.test(c) ? String.fromCodePoint(c.codePointAt(0)! + 0xfee0) : c)).join('');
    // Without knowing the token (the master's check): the encodings that stand for it character by character.
    expect(tokenLeakIn(`see ${pct(token)}`)).toBe('a disguised token');
    expect(tokenLeakIn(`see ${fullwidth(token)}`)).toBe('a disguised token');
    // Knowing it (the loop's check): any separators, any case, forwards or backwards.
    const body = token.slice(TOKEN_PREFIX.length);
    for (const text of [
      [...token].join('.'),
      [...body].map((c) => `- ${c}`).join('\n'),
      body.toUpperCase(),
      reverse([...body].join(', ')),
      `letters: ${[...body.slice(3, 30)].join('|')}`,
    ])
      expect(tokenLeakIn(text, [token]), text).not.toBeNull();
  });

  it('finds every issued token in every form (property)', () => {
    const forms = [
      (t: string) => t,
      (t: string) => t.split('').join(' '),
      reverse,
      b64,
      (t: string) => Buffer.from(t).toString('hex'),
    ];
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.nat(forms.length - 1),
        fc.string(),
        (bytes, f, pad) => {
          const t = TOKEN_PREFIX + Buffer.from(bytes).toString('base64url');
          expect(tokenLeakIn(`${pad} ${forms[f]!(t)} ${pad}`)).not.toBeNull();
        },
      ),
    );
  });

  it('leaves ordinary review text alone', () => {
    for (const text of [
      'Reads train.py and data/*.csv; writes out/model.pt. The gpb_ prefix marks tokens.',
      `digest ${'ab12'.repeat(16)} matches; sha256 ${randomBytes(32).toString('hex')}`,
      `a base64 blob ${randomBytes(60).toString('base64')} in the notes`,
      'agent reviewer verdict: approve, 1 card, no network',
      '',
    ])
      expect(tokenLeakIn(text, [token]), text).toBeNull();
  });
});
