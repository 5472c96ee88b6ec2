#!/bin/sh
# check-style.sh -- the style check of `make check` (STYLE.md R19):
# no trailing whitespace, no space-indented C lines, no modelines, lines
# of at most 100 columns (80 is the aim; clang-format wraps at 80), and,
# when clang-format is installed, `clang-format --dry-run` over the C
# sources (reported, counted).  Exit 1 on a hard rule.
set -u
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' '*.hip' 2>/dev/null)
fail=0
for f in $files; do
	if grep -n '[[:space:]]$' "$f" >/dev/null; then
		echo "$f: trailing whitespace:"; grep -n '[[:space:]]$' "$f" | head -3; fail=1
	fi
	if grep -nE '^ {8}' "$f" >/dev/null; then
		echo "$f: indented with spaces, not tabs:"; grep -nE '^ {8}' "$f" | head -3; fail=1
	fi
	if grep -nE '(vim?|ex):[[:space:]]*set|-\*- .*mode:' "$f" >/dev/null; then
		echo "$f: modeline"; fail=1
	fi
	long=$(expand -t 8 "$f" | awk -v f="$f" 'length > 100 {print f ": " NR}' | head -3)
	[ -n "$long" ] && { echo "$long: longer than 100 columns"; fail=1; }
done
if command -v clang-format >/dev/null 2>&1; then
	n=$(clang-format --dry-run $files 2>&1 | grep -c 'warning:' || true)
	echo "style: clang-format would change $n line(s) (advisory)"
fi
[ $fail = 0 ] && echo "style: ok"
exit $fail
