/**
 * Input-path globs of standing grants (src/contracts/standing-grant.ts InputGlobSchema): `*` matches
 * within one segment, `?` one character other than `/`, a whole segment `**` any number of segments
 * (zero included). Matching is on the whole path, case-sensitive, with no normalisation: input paths
 * are already canonical (no `.`, `..`, empty segments or backslashes).
 */

/** Whether `path` matches `glob`. */
export function globMatches(glob: string, path: string): boolean {
  return matchSegments(glob.split('/'), path.split('/'));
}

/** Whether `path` matches any of `globs`. */
export function anyGlobMatches(globs: readonly string[], path: string): boolean {
  return globs.some((g) => globMatches(g, path));
}

/**
 * Whether segments `g` match segments `p`, by a table over (glob position, path position) filled from
 * the ends: one segment test per cell, so at most |g| × |p| of them. The backtracking this replaced tried
 * every way to split the path between `**`s: ~170 ms for `**` three times against a 256-segment path
 * (an input path can have that many), 11 s for a grant's 64 such globs, in one block of the event loop.
 */
function matchSegments(g: readonly string[], p: readonly string[]): boolean {
  const width = p.length + 1;
  // next[j]: g from gi + 1 matches p from j; row[j]: g from gi does.
  let next = new Uint8Array(width);
  next[p.length] = 1;
  for (let gi = g.length - 1; gi >= 0; gi--) {
    const row = new Uint8Array(width);
    const head = g[gi]!;
    for (let j = p.length; j >= 0; j--)
      row[j] =
        head === '**'
          ? next[j]! || (j < p.length ? row[j + 1]! : 0)
          : j < p.length && next[j + 1] && segmentMatches(head, p[j]!)
            ? 1
            : 0;
    next = row;
  }
  return next[0] === 1;
}

/** One segment against one pattern segment, iteratively (no regex built from submitter text). */
function segmentMatches(pattern: string, s: string): boolean {
  let pi = 0;
  let si = 0;
  let star = -1;
  let mark = 0;
  while (si < s.length) {
    if (pi < pattern.length && (pattern[pi] === '?' || pattern[pi] === s[si])) {
      pi++;
      si++;
    } else if (pi < pattern.length && pattern[pi] === '*') {
      star = pi++;
      mark = si;
    } else if (star !== -1) {
      pi = star + 1;
      si = ++mark;
    } else return false;
  }
  while (pi < pattern.length && pattern[pi] === '*') pi++;
  return pi === pattern.length;
}
