#!/bin/sh
# Model command for `gpu-broker review agent --command` with Claude Code: the prompt arrives on stdin,
# one JSON verdict leaves on stdout. No tools at all (--tools "") and no MCP servers, not even the ones
# in your own config (--strict-mcp-config with none given): the prompt holds everything to judge, and a
# model that can act is a model an injection can steer. Run it from an empty directory.
exec claude -p --tools "" --strict-mcp-config --output-format text ${GPU_BROKER_REVIEW_MODEL:+--model "$GPU_BROKER_REVIEW_MODEL"}
