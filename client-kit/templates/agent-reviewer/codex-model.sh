#!/bin/sh
# Model command for `gpu-broker review agent --command` with Codex: the prompt arrives on stdin (`-`),
# the final message (one JSON verdict) leaves on stdout, progress goes to stderr. Read-only sandbox,
# no approvals asked, run from an empty directory. Flag names drift between Codex releases: check
# `codex exec --help` once.
exec codex exec --sandbox read-only --skip-git-repo-check ${GPU_BROKER_REVIEW_MODEL:+--model "$GPU_BROKER_REVIEW_MODEL"} -
