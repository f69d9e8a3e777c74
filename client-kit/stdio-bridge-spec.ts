import { defineCommand } from '../src/platform/args.js';

/**
 * The stdio bridge's command line (`gpu-broker mcp-stdio`, and the standalone bundle
 * `gpu-broker-stdio-bridge.mjs`): flags, environment and examples, for its parser and `--help`. It lives
 * with the bridge so the bundle needs nothing from src/cli/; the CLI lists it among its commands.
 */

/** `gpu-broker mcp-stdio`. */
export const MCP_STDIO = defineCommand({
  name: 'mcp-stdio',
  usage: ['mcp-stdio --url URL [--token-env NAME] [--ca-file FILE]'],
  summary:
    "Serves the master's MCP tools on stdin/stdout for harnesses that only run stdio MCP servers. Checks the token at start.",
  flags: {
    url: {
      type: 'string',
      value: 'URL',
      help: 'the master, e.g. https://gpu-host:8443 (default $GPU_BROKER_URL)',
    },
    'token-env': {
      type: 'string',
      value: 'NAME',
      help: 'environment variable holding the bearer token (default GPU_BROKER_TOKEN)',
    },
    'ca-file': {
      type: 'string',
      value: 'FILE',
      help: 'CA certificate to trust (default $GPU_BROKER_CA_FILE)',
    },
  },
  env: {
    GPU_BROKER_URL: 'the master URL when --url is not given',
    GPU_BROKER_TOKEN: 'the bearer token (never taken from argv)',
    GPU_BROKER_CA_FILE: 'CA certificate when --ca-file is not given',
  },
  examples: ['mcp-stdio --url https://gpu-host:8443 --ca-file ~/.config/gpu-broker/ca.pem'],
});
