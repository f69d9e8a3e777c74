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

function matchSegments(g: readonly string[], p: readonly string[]): boolean {
  if (g.length === 0) return p.length === 0;
  const [head, ...rest] = g;
  if (head === '**') {
    for (let skip = 0; skip <= p.length; skip++) if (matchSegments(rest, p.slice(skip))) return true;
    return false;
  }
  if (p.length === 0) return false;
  return segmentMatches(head!, p[0]!) && matchSegments(rest, p.slice(1));
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
