import { buildClientKit, defaultBridgeBundle, verifyClientKit } from '../../../client-kit/build.js';
import type { FlagValues } from '../../platform/args.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { CLIENT_KIT } from './command-specs.js';

/**
 * `gpu-broker client-kit build --out DIR [--url URL] [--ca-file F] [--json]` and
 * `gpu-broker client-kit verify DIR [--json]` (docs/clients.md). Exit codes: 0 success, 1 the build
 * failed or the kit does not verify, 2 usage.
 */

/** Runs `client-kit build|verify`. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(CLIENT_KIT, argv, io);
  if (typeof parsed === 'number') return parsed;
  const [sub, ...rest] = parsed.positionals;
  if (sub === 'build') {
    if (rest.length > 0) return usageError(io, CLIENT_KIT, `unexpected "${rest[0]}"`);
    return build(parsed.values, io);
  }
  if (sub === 'verify') {
    if (parsed.values.out || parsed.values.url || parsed.values['ca-file'])
      return usageError(io, CLIENT_KIT, 'verify takes only DIR [--json]');
    return verify(rest, parsed.values.json === true, io);
  }
  return usageError(
    io,
    CLIENT_KIT,
    sub ? `unknown subcommand "${sub}"` : 'which subcommand: build or verify?',
  );
};

async function build(values: FlagValues<typeof CLIENT_KIT.flags>, io: CliIo): Promise<number> {
  if (!values.out) return usageError(io, CLIENT_KIT, '--out DIR is required');
  const url = values.url ?? io.env['GPU_BROKER_URL'];
  if (!url) return usageError(io, CLIENT_KIT, '--url is required (or set GPU_BROKER_URL)');
  const caFile = values['ca-file'] ?? io.env['GPU_BROKER_CA_FILE'];

  try {
    const { files } = await buildClientKit({
      outDir: values.out,
      url,
      bridgeBundle: defaultBridgeBundle(),
      ...(caFile ? { caFile } : {}),
    });
    if (values.json) {
      io.stdout(`${JSON.stringify({ out: values.out, url, ca_file: caFile ?? null, files })}\n`);
    } else {
      io.stdout(
        `client kit for ${url} written to ${values.out} (${files.length} files)\n` +
          files.map((f) => `  ${f}\n`).join('') +
          `next: read ${values.out}/README.md; check it with \`sha256sum -c SHA256SUMS\` inside the kit\n` +
          (caFile
            ? ''
            : 'note: no --ca-file given, so the kit assumes the master has a publicly trusted certificate\n'),
      );
    }
    return 0;
  } catch (err) {
    const message = (err as Error).message;
    if (values.json) io.stdout(`${JSON.stringify({ ok: false, error: message })}\n`);
    io.stderr(`gpu-broker client-kit build: ${message}\n`);
    return 1;
  }
}

async function verify(positionals: string[], json: boolean, io: CliIo): Promise<number> {
  const [dir, ...extra] = positionals;
  if (dir === undefined || extra.length > 0)
    return usageError(io, CLIENT_KIT, 'verify takes exactly one DIR');

  const result = await verifyClientKit(dir);
  if (json) io.stdout(`${JSON.stringify(result)}\n`);
  else if (result.ok) io.stdout(`client kit ${dir}: OK\n`);
  else io.stdout(`client kit ${dir}: FAILED\n${result.problems.map((p) => `  ${p}\n`).join('')}`);
  return result.ok ? 0 : 1;
}
