import { parseArgs } from 'node:util';
import { buildClientKit, verifyClientKit } from '../../client-kit/build.js';
import type { CliIo, CommandRunner } from './io.js';

/**
 * `gpu-broker client-kit build --out DIR [--url URL] [--ca-file F] [--json]` and
 * `gpu-broker client-kit verify DIR [--json]` (DESIGN §13). Exit codes: 0 success, 1 the build
 * failed or the kit does not verify, 2 usage.
 */

const USAGE = `usage: gpu-broker client-kit build --out DIR [--url URL] [--ca-file FILE] [--json]
       gpu-broker client-kit verify DIR [--json]

build   renders the skill, example specs and harness configs for one master into a new directory
        (--url defaults to $GPU_BROKER_URL, --ca-file to $GPU_BROKER_CA_FILE: the master's
        <data-dir>/tls/ca.pem when it uses its dev CA). The kit never contains a token or a key.
verify  checks a kit against its MANIFEST.json and SHA256SUMS: nothing missing, added or altered.
`;

/** Runs `client-kit build|verify`. */
export const run: CommandRunner = async (argv, io) => {
  const [sub, ...rest] = argv;
  if (sub === 'build') return build(rest, io);
  if (sub === 'verify') return verify(rest, io);
  if (sub === undefined || sub === '--help' || sub === '-h' || sub === 'help') {
    io.stdout(USAGE);
    return sub === undefined ? 2 : 0;
  }
  return usage(io, `unknown subcommand: ${sub}`);
};

async function build(argv: string[], io: CliIo): Promise<number> {
  let values: {
    out?: string | undefined;
    url?: string | undefined;
    'ca-file'?: string | undefined;
    json?: boolean | undefined;
  };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        out: { type: 'string' },
        url: { type: 'string' },
        'ca-file': { type: 'string' },
        json: { type: 'boolean' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    return usage(io, (err as Error).message);
  }
  if (!values.out) return usage(io, '--out DIR is required');
  const url = values.url ?? io.env['GPU_BROKER_URL'];
  if (!url) return usage(io, '--url is required (or set GPU_BROKER_URL)');
  const caFile = values['ca-file'] ?? io.env['GPU_BROKER_CA_FILE'];

  try {
    const { files } = await buildClientKit({ outDir: values.out, url, ...(caFile ? { caFile } : {}) });
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

async function verify(argv: string[], io: CliIo): Promise<number> {
  let parsed: { values: { json?: boolean | undefined }; positionals: string[] };
  try {
    parsed = parseArgs({
      args: argv,
      options: { json: { type: 'boolean' } },
      strict: true,
      allowPositionals: true,
    });
  } catch (err) {
    return usage(io, (err as Error).message);
  }
  const [dir, ...extra] = parsed.positionals;
  if (dir === undefined || extra.length > 0) return usage(io, 'verify takes exactly one DIR');

  const result = await verifyClientKit(dir);
  if (parsed.values.json) io.stdout(`${JSON.stringify(result)}\n`);
  else if (result.ok) io.stdout(`client kit ${dir}: OK\n`);
  else io.stdout(`client kit ${dir}: FAILED\n${result.problems.map((p) => `  ${p}\n`).join('')}`);
  return result.ok ? 0 : 1;
}

function usage(io: CliIo, message: string): number {
  io.stderr(`gpu-broker client-kit: ${message}\n${USAGE}`);
  return 2;
}
