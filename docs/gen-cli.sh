#!/usr/bin/env bash
# Writes docs/cli.md from the commands' own --help (their cobra
# definitions): every command and subcommand of zrtc and zrt-run with its
# flags. Run by `make cli-docs` after changing a command or flag.
set -euo pipefail
bin=${1:?usage: gen-cli.sh BIN_DIR}
subcommands() { # the commands listed under "Available Commands:"
	"$@" --help | awk '/^Available Commands:/ {on=1; next} on && /^$/ {exit} on {print $1}' |
		grep -v -x -e help -e completion || true
}
section() { # depth, command words...
	local depth=$1; shift
	local hashes; hashes=$(printf '#%.0s' $(seq 1 "$depth"))
	printf '%s `%s`\n\n```\n' "$hashes" "$*"
	# The binaries' paths are the build's: name them as a user types them.
	"$bin/$1" "${@:2}" --help | sed "s|$bin/||g"
	printf '```\n\n'
	local sub
	for sub in $(subcommands "$bin/$1" "${@:2}"); do
		section $((depth + 1)) "$@" "$sub"
	done
}
cat <<'HEAD'
# Command reference

Generated from the commands' own help (`make cli-docs`, which runs
`docs/gen-cli.sh`): every command of `zrtc` and `zrt-run` and every flag,
as this revision defines them. The README's quick start and
[server.md](server.md), [deploy.md](deploy.md) say how they fit together.

**Exit status** (both commands): 0 on success; 2 on a usage error (an
unknown command or flag, a bad argument); 3 on unsupported input (valid,
but zrt does not handle it yet: `format/support`); 4 on malformed input (a
corrupt GGUF, bundle, kernel blob, bundle set or pack); 1 on any other
failure (`cmd/internal/exitcode`).

HEAD
section 2 zrtc
section 2 zrt-run
